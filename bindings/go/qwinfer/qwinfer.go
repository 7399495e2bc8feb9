// Package qwinfer is the Go binding of libqwinfer, an embeddable C inference
// library for Qwen3 models (include/qwinfer.h; docs/api.md).
//
// An Engine owns one qw_engine and one goroutine that drives it: the
// goroutine sleeps in qw_engine_wait (no CPU while idle; woken at once by a
// submit from any goroutine) and steps while there is work, handing each
// request's events to its channel. Any number of goroutines may call
// Generate and Stream at once, without runtime.LockOSThread: error messages
// are read from the request or engine they belong to (qw_request_get_error),
// not from the OS thread.
//
//	eng, err := qwinfer.NewEngine("/models/qwen3-0.6b")
//	defer eng.Close()
//	out, err := eng.Generate(ctx, qwinfer.Text("Hello"), qwinfer.SamplingParams{MaxTokens: 32})
package qwinfer

/*
#cgo pkg-config: qwinfer
#include "qwgo.h"
*/
import "C"

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"unsafe"
)

// Error is a qw_status other than QW_OK with its message.
type Error struct {
	Status  int    // the qw_status value
	Name    string // e.g. "QW_ERR_TOKEN_OUT_OF_RANGE: token id outside the vocabulary"
	Message string // the library's detail message
}

func (e *Error) Error() string { return e.Name + ": " + e.Message }

// Status values a caller may want to test with errors.As.
const (
	ErrInvalidArgument = int(C.QW_ERR_INVALID_ARGUMENT)
	ErrTokenOutOfRange = int(C.QW_ERR_TOKEN_OUT_OF_RANGE)
	ErrTooLong         = int(C.QW_ERR_TOO_LONG)
	ErrQueueFull       = int(C.QW_ERR_QUEUE_FULL)
	ErrCancelled       = int(C.QW_ERR_CANCELLED)
)

// ErrClosed is returned by calls on an Engine after Close.
var ErrClosed = errors.New("qwinfer: engine closed")

type slotReader func(buf *C.char, cap C.size_t, n *C.size_t) C.qw_status

// newError builds an Error from a status and the object's own message.
func newError(st C.qw_status, read slotReader) error {
	if st == C.QW_OK {
		return nil
	}
	var n C.size_t
	msg := ""
	if read(nil, 0, &n) == C.QW_OK && n > 0 {
		buf := (*C.char)(C.malloc(n + 1))
		defer C.free(unsafe.Pointer(buf))
		if read(buf, n+1, &n) == C.QW_OK {
			msg = C.GoStringN(buf, C.int(n))
		}
	}
	return &Error{Status: int(st), Name: C.GoString(C.qw_status_string(st)), Message: msg}
}

func reqError(st C.qw_status, r *C.qw_request) error {
	return newError(st, func(b *C.char, c C.size_t, n *C.size_t) C.qw_status { return C.qw_request_get_error(r, b, c, n) })
}

func optError(st C.qw_status, o *C.qw_engine_options) error {
	return newError(st, func(b *C.char, c C.size_t, n *C.size_t) C.qw_status {
		return C.qw_engine_options_get_error(o, b, c, n)
	})
}

func engError(st C.qw_status, e *C.qw_engine) error {
	return newError(st, func(b *C.char, c C.size_t, n *C.size_t) C.qw_status { return C.qw_engine_get_error(e, b, c, n) })
}

// Option sets an engine option (QW_OPT_* in qwinfer.h).
type Option func(o *C.qw_engine_options) error

// WithDevice selects "cpu" (default) or "cuda:N".
func WithDevice(dev string) Option {
	return func(o *C.qw_engine_options) error {
		cs := C.CString(dev)
		defer C.free(unsafe.Pointer(cs))
		return optError(C.qw_engine_options_set_string(o, C.QW_OPT_DEVICE, cs), o)
	}
}

// WithInt sets an integer option by its key, e.g. WithInt(qwinfer.OptMaxNumSeqs, 64).
func WithInt(key int, v int64) Option {
	return func(o *C.qw_engine_options) error {
		return optError(C.qw_engine_options_set_int(o, C.qw_engine_option(key), C.int64_t(v)), o)
	}
}

// Keys for WithInt (the rest are in qwinfer.h).
const (
	OptNumThreads    = int(C.QW_OPT_NUM_THREADS)
	OptMaxNumSeqs    = int(C.QW_OPT_MAX_NUM_SEQS)
	OptMaxModelLen   = int(C.QW_OPT_MAX_MODEL_LEN)
	OptSeed          = int(C.QW_OPT_SEED)
	OptNumKVBlocks   = int(C.QW_OPT_NUM_KV_BLOCKS)
	OptNumerics      = int(C.QW_OPT_NUMERICS)
	OptMaxWaitingReq = int(C.QW_OPT_MAX_WAITING_REQUESTS)
	OptKVCacheDtype  = int(C.QW_OPT_KV_CACHE_DTYPE)
)

// Values of OptKVCacheDtype (qw_kv_cache_dtype in qwinfer.h).
const (
	KVCacheAuto    = int64(C.QW_KV_CACHE_AUTO)
	KVCacheF32     = int64(C.QW_KV_CACHE_F32)
	KVCacheBF16    = int64(C.QW_KV_CACHE_BF16)
	KVCacheFP8E4M3 = int64(C.QW_KV_CACHE_FP8_E4M3)
)

// Event is one step's news for a request: the text its token completed.
type Event struct {
	Text         string // the UTF-8 this token completed (pieces join to the final text)
	Token        int32  // the token id, or -1 for an event without one
	Sample       int    // which of SamplingParams.N samples
	FinishReason string // "" while it runs; "stop", "length", "cancelled", "error", "timeout"
}

type request struct {
	c      *C.qw_request
	events chan Event
	n      int // samples
	done   int // samples finished
}

// Engine drives one qw_engine from its own goroutine.
type Engine struct {
	c       *C.qw_engine
	mu      sync.Mutex // guards reqs and every step-thread call
	reqs    map[uint64]*request
	evs     *C.qw_event
	quit    chan struct{}
	stopped chan struct{}
	closed  bool
}

const maxEvents = 256

// NewEngine loads model (a Hugging Face directory) and starts the engine goroutine.
func NewEngine(model string, opts ...Option) (*Engine, error) {
	var o *C.qw_engine_options
	if st := C.qw_engine_options_create(&o); st != C.QW_OK {
		return nil, &Error{Status: int(st), Name: C.GoString(C.qw_status_string(st))}
	}
	defer C.qw_engine_options_destroy(o)
	cs := C.CString(model)
	defer C.free(unsafe.Pointer(cs))
	if err := optError(C.qw_engine_options_set_string(o, C.QW_OPT_MODEL_PATH, cs), o); err != nil {
		return nil, err
	}
	for _, f := range opts {
		if err := f(o); err != nil {
			return nil, err
		}
	}
	e := &Engine{reqs: map[uint64]*request{}, quit: make(chan struct{}), stopped: make(chan struct{})}
	if err := optError(C.qw_engine_create(o, &e.c), o); err != nil {
		return nil, err
	}
	e.evs = C.qwgo_events(maxEvents)
	go e.loop()
	return e, nil
}

// loop sleeps in qw_engine_wait and steps while there is work.
func (e *Engine) loop() {
	defer close(e.stopped)
	for {
		select {
		case <-e.quit:
			return
		default:
		}
		if C.qw_engine_wait(e.c, 200) == 0 {
			continue
		}
		e.mu.Lock()
		for C.qw_engine_has_work(e.c) != 0 {
			if err := e.stepLocked(); err != nil {
				break // the failed requests got their error events
			}
		}
		e.mu.Unlock()
	}
}

func (e *Engine) stepLocked() error {
	var n C.size_t
	st := C.qw_engine_step(e.c, unsafe.Pointer(e.evs), maxEvents, C.size_t(unsafe.Sizeof(*e.evs)), &n)
	for i := C.size_t(0); i < n; i++ {
		ev := C.qwgo_event_at(e.evs, i)
		r := e.reqs[uint64(ev.request_id)]
		if r == nil {
			continue
		}
		out := Event{Token: -1, Sample: int(ev.sample_index)}
		if ev.kind == C.QW_EVENT_TOKEN {
			out.Token = int32(ev.token)
		}
		var piece *C.char
		var plen C.size_t
		if C.qw_request_get_text_piece(ev.request, &piece, &plen) == C.QW_OK && plen > 0 {
			out.Text = C.GoStringN(piece, C.int(plen))
		}
		if ev.finish_reason != C.QW_FINISH_NONE {
			out.FinishReason = C.GoString(C.qw_finish_reason_string(C.qw_finish_reason(ev.finish_reason)))
			r.done++
		}
		r.events <- out // buffered: see submit
		if r.done >= r.n {
			close(r.events)
			delete(e.reqs, uint64(ev.request_id))
		}
	}
	return engError(st, e.c)
}

// Close cancels what runs, stops the goroutine and frees the engine.
func (e *Engine) Close() {
	e.mu.Lock()
	if e.closed {
		e.mu.Unlock()
		return
	}
	e.closed = true
	e.mu.Unlock()
	close(e.quit)
	<-e.stopped
	e.mu.Lock()
	for _, r := range e.reqs {
		C.qw_engine_cancel(e.c, r.c)
	}
	for C.qw_engine_has_work(e.c) != 0 {
		if e.stepLocked() != nil {
			break
		}
	}
	for id, r := range e.reqs {
		close(r.events)
		delete(e.reqs, id)
	}
	C.qw_engine_destroy(e.c)
	C.free(unsafe.Pointer(e.evs))
	e.mu.Unlock()
}

// Prompt is what a request starts from.
type Prompt struct {
	text string
	ids  []int32
	chat []Message
	// NoThink renders a chat without Qwen3's thinking block.
	NoThink bool
}

// Text is a prompt given as text (encoded by the model's tokenizer).
func Text(s string) Prompt { return Prompt{text: s} }

// Tokens is a prompt given as token ids.
func Tokens(ids []int32) Prompt { return Prompt{ids: ids} }

// Message is one chat turn: Role is "system", "user", "assistant" or "tool".
type Message struct{ Role, Content string }

// Chat is a conversation rendered with Qwen3's chat template.
func Chat(msgs ...Message) Prompt { return Prompt{chat: msgs} }

// SamplingParams are the per-request options (docs/api.md). Zero values
// mean the library's defaults, except Temperature, whose zero is greedy:
// set DefaultTemperature for 1.0.
type SamplingParams struct {
	MaxTokens         int
	Temperature       float64
	TopP              float64 // 0: off
	TopK              int
	MinP              float64
	Seed              *uint64
	N                 int
	Stop              []string
	StopTokenIDs      []int32
	IgnoreEOS         bool
	RepetitionPenalty float64 // 0: off
	PresencePenalty   float64
	FrequencyPenalty  float64
}

// Output is a finished request.
type Output struct {
	Text         []string  // per sample
	Tokens       [][]int32 // per sample
	FinishReason []string  // per sample
}

func (e *Engine) newRequest(p Prompt, sp SamplingParams) (*C.qw_request, error) {
	var r *C.qw_request
	if st := C.qw_request_create(&r); st != C.QW_OK {
		return nil, &Error{Status: int(st), Name: C.GoString(C.qw_status_string(st))}
	}
	fail := func(err error) (*C.qw_request, error) {
		C.qw_request_release(r)
		return nil, err
	}
	switch {
	case p.chat != nil:
		var chat *C.qw_chat
		if st := C.qw_chat_create(&chat); st != C.QW_OK {
			return fail(&Error{Status: int(st), Name: C.GoString(C.qw_status_string(st))})
		}
		defer C.qw_chat_destroy(chat)
		roles := map[string]C.qw_chat_role{"system": C.QW_CHAT_SYSTEM, "user": C.QW_CHAT_USER,
			"assistant": C.QW_CHAT_ASSISTANT, "tool": C.QW_CHAT_TOOL}
		for _, m := range p.chat {
			role, ok := roles[m.Role]
			if !ok {
				return fail(fmt.Errorf("qwinfer: unknown chat role %q", m.Role))
			}
			cs := C.CString(m.Content)
			st := C.qw_chat_add_message(chat, role, cs, C.size_t(len(m.Content)))
			C.free(unsafe.Pointer(cs))
			if st != C.QW_OK {
				return fail(&Error{Status: int(st), Name: C.GoString(C.qw_status_string(st))})
			}
		}
		flags := C.uint32_t(C.QW_CHAT_ADD_GENERATION_PROMPT)
		if p.NoThink {
			flags |= C.QW_CHAT_DISABLE_THINKING
		}
		if err := reqError(C.qw_request_set_chat(r, chat, flags), r); err != nil {
			return fail(err)
		}
	case p.ids != nil:
		if len(p.ids) > 0 {
			cids := (*C.int32_t)(C.malloc(C.size_t(len(p.ids)) * 4))
			copy(unsafe.Slice((*int32)(unsafe.Pointer(cids)), len(p.ids)), p.ids)
			st := C.qw_request_set_prompt(r, cids, C.size_t(len(p.ids)))
			C.free(unsafe.Pointer(cids))
			if err := reqError(st, r); err != nil {
				return fail(err)
			}
		}
	default:
		cs := C.CString(p.text)
		st := C.qw_request_set_prompt_text(r, cs, C.size_t(len(p.text)))
		C.free(unsafe.Pointer(cs))
		if err := reqError(st, r); err != nil {
			return fail(err)
		}
	}
	seti := func(k C.qw_request_option, v int64) error { return reqError(C.qw_request_set_int(r, k, C.int64_t(v)), r) }
	setd := func(k C.qw_request_option, v float64) error { return reqError(C.qw_request_set_double(r, k, C.double(v)), r) }
	var errs []error
	if sp.MaxTokens > 0 {
		errs = append(errs, seti(C.QW_REQ_MAX_TOKENS, int64(sp.MaxTokens)))
	}
	errs = append(errs, setd(C.QW_REQ_TEMPERATURE, sp.Temperature))
	if sp.TopP > 0 {
		errs = append(errs, setd(C.QW_REQ_TOP_P, sp.TopP))
	}
	if sp.TopK != 0 {
		errs = append(errs, seti(C.QW_REQ_TOP_K, int64(sp.TopK)))
	}
	if sp.MinP != 0 {
		errs = append(errs, setd(C.QW_REQ_MIN_P, sp.MinP))
	}
	if sp.Seed != nil {
		errs = append(errs, seti(C.QW_REQ_SEED, int64(*sp.Seed)))
	}
	if sp.N > 1 {
		errs = append(errs, seti(C.QW_REQ_N, int64(sp.N)))
	}
	if sp.IgnoreEOS {
		errs = append(errs, seti(C.QW_REQ_IGNORE_EOS, 1))
	}
	if sp.RepetitionPenalty != 0 {
		errs = append(errs, setd(C.QW_REQ_REPETITION_PENALTY, sp.RepetitionPenalty))
	}
	if sp.PresencePenalty != 0 {
		errs = append(errs, setd(C.QW_REQ_PRESENCE_PENALTY, sp.PresencePenalty))
	}
	if sp.FrequencyPenalty != 0 {
		errs = append(errs, setd(C.QW_REQ_FREQUENCY_PENALTY, sp.FrequencyPenalty))
	}
	if len(sp.StopTokenIDs) > 0 {
		c := (*C.int32_t)(C.malloc(C.size_t(len(sp.StopTokenIDs)) * 4))
		copy(unsafe.Slice((*int32)(unsafe.Pointer(c)), len(sp.StopTokenIDs)), sp.StopTokenIDs)
		errs = append(errs, reqError(C.qw_request_set_stop_tokens(r, c, C.size_t(len(sp.StopTokenIDs))), r))
		C.free(unsafe.Pointer(c))
	}
	if len(sp.Stop) > 0 {
		strs := (**C.char)(C.malloc(C.size_t(len(sp.Stop)) * C.size_t(unsafe.Sizeof(uintptr(0)))))
		lens := (*C.size_t)(C.malloc(C.size_t(len(sp.Stop)) * C.size_t(unsafe.Sizeof(C.size_t(0)))))
		ss := unsafe.Slice(strs, len(sp.Stop))
		ls := unsafe.Slice(lens, len(sp.Stop))
		for i, s := range sp.Stop {
			ss[i] = C.CString(s)
			ls[i] = C.size_t(len(s))
		}
		errs = append(errs, reqError(C.qw_request_set_stop_strings(r, strs, lens, C.size_t(len(sp.Stop))), r))
		for i := range sp.Stop {
			C.free(unsafe.Pointer(ss[i]))
		}
		C.free(unsafe.Pointer(strs))
		C.free(unsafe.Pointer(lens))
	}
	for _, err := range errs {
		if err != nil {
			return fail(err)
		}
	}
	return r, nil
}

// Stream submits a request and returns its events; the channel is closed
// after the last sample's finishing event. Cancelling ctx cancels the
// request (its last event then says "cancelled"). The caller must drain the
// channel (events are buffered for the whole output).
func (e *Engine) Stream(ctx context.Context, p Prompt, sp SamplingParams) (<-chan Event, error) {
	r, err := e.newRequest(p, sp)
	if err != nil {
		return nil, err
	}
	n := sp.N
	if n < 1 {
		n = 1
	}
	buf := n * (sp.MaxTokens + 2)
	if sp.MaxTokens <= 0 {
		buf = n * 4096
	}
	req := &request{c: r, events: make(chan Event, buf), n: n}
	id := uint64(C.qw_request_get_id(r))
	e.mu.Lock()
	if e.closed {
		e.mu.Unlock()
		C.qw_request_release(r)
		return nil, ErrClosed
	}
	e.reqs[id] = req
	e.mu.Unlock()
	if err := reqError(C.qw_engine_submit(e.c, r), r); err != nil {
		e.mu.Lock()
		delete(e.reqs, id)
		e.mu.Unlock()
		C.qw_request_release(r)
		return nil, err
	}
	out := make(chan Event, buf)
	go func() {
		defer C.qw_request_release(r)
		defer close(out)
		cancelled := false
		for {
			select {
			case ev, ok := <-req.events:
				if !ok {
					return
				}
				out <- ev
			case <-ctx.Done():
				if !cancelled {
					cancelled = true
					C.qw_engine_cancel(e.c, r) // thread-safe; an already finished request is fine
				}
				ev, ok := <-req.events
				if !ok {
					return
				}
				out <- ev
			}
		}
	}()
	return out, nil
}

// Generate runs a request to the end and returns its text and tokens.
func (e *Engine) Generate(ctx context.Context, p Prompt, sp SamplingParams) (*Output, error) {
	ch, err := e.Stream(ctx, p, sp)
	if err != nil {
		return nil, err
	}
	n := sp.N
	if n < 1 {
		n = 1
	}
	out := &Output{Text: make([]string, n), Tokens: make([][]int32, n), FinishReason: make([]string, n)}
	texts := make([][]byte, n)
	for ev := range ch {
		texts[ev.Sample] = append(texts[ev.Sample], ev.Text...)
		if ev.Token >= 0 {
			out.Tokens[ev.Sample] = append(out.Tokens[ev.Sample], ev.Token)
		}
		if ev.FinishReason != "" {
			out.FinishReason[ev.Sample] = ev.FinishReason
		}
	}
	for i := range texts {
		out.Text[i] = string(texts[i])
	}
	return out, nil
}
