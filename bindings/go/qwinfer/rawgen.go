package qwinfer

/*
#include "qwgo.h"
*/
import "C"

import "unsafe"

// rawGenerate runs one request through the C API directly, stepping by hand
// on the calling goroutine (no Engine, no goroutine): the reference the
// tests compare Engine's output with (cgo is not allowed in _test.go files).
func rawGenerate(model string, ids []int32, maxTokens int, seed uint64, temperature float64) ([]int32, error) {
	var o *C.qw_engine_options
	C.qw_engine_options_create(&o)
	defer C.qw_engine_options_destroy(o)
	cs := C.CString(model)
	defer C.free(unsafe.Pointer(cs))
	C.qw_engine_options_set_string(o, C.QW_OPT_MODEL_PATH, cs)
	var e *C.qw_engine
	if err := optError(C.qw_engine_create(o, &e), o); err != nil {
		return nil, err
	}
	defer C.qw_engine_destroy(e)
	var r *C.qw_request
	C.qw_request_create(&r)
	defer C.qw_request_release(r)
	cids := (*C.int32_t)(C.malloc(C.size_t(len(ids)) * 4))
	defer C.free(unsafe.Pointer(cids))
	copy(unsafe.Slice((*int32)(unsafe.Pointer(cids)), len(ids)), ids)
	C.qw_request_set_prompt(r, cids, C.size_t(len(ids)))
	C.qw_request_set_int(r, C.QW_REQ_MAX_TOKENS, C.int64_t(maxTokens))
	C.qw_request_set_int(r, C.QW_REQ_SEED, C.int64_t(seed))
	C.qw_request_set_double(r, C.QW_REQ_TEMPERATURE, C.double(temperature))
	if err := reqError(C.qw_engine_submit(e, r), r); err != nil {
		return nil, err
	}
	evs := C.qwgo_events(16)
	defer C.free(unsafe.Pointer(evs))
	var toks []int32
	for C.qw_engine_has_work(e) != 0 {
		var n C.size_t
		if err := engError(C.qw_engine_step(e, unsafe.Pointer(evs), 16, C.size_t(unsafe.Sizeof(*evs)), &n), e); err != nil {
			return nil, err
		}
		for i := C.size_t(0); i < n; i++ {
			if ev := C.qwgo_event_at(evs, i); ev.kind == C.QW_EVENT_TOKEN {
				toks = append(toks, int32(ev.token))
			}
		}
	}
	return toks, nil
}
