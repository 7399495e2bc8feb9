package qwinfer

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// tinyModel makes a tiny random Qwen3 model with the build's qw-makemodel
// (QWINFER_BUILD, default ../../../build).
func tinyModel(t *testing.T) string {
	t.Helper()
	build := os.Getenv("QWINFER_BUILD")
	if build == "" {
		build = "../../../build"
	}
	dir := filepath.Join(t.TempDir(), "tiny")
	out, err := exec.Command(filepath.Join(build, "bin", "qw-makemodel"), "--shape", "tiny", "--dtype", "bf16",
		"--seed", "21", "--out", dir).CombinedOutput()
	if err != nil {
		t.Fatalf("qw-makemodel: %v\n%s", err, out)
	}
	return dir
}

func u64(v uint64) *uint64 { return &v }

func TestGenerateMatchesTheCAPI(t *testing.T) {
	model := tinyModel(t)
	eng, err := NewEngine(model)
	if err != nil {
		t.Fatal(err)
	}
	defer eng.Close()
	prompt := []int32{5, 17, 99, 3, 250}
	got, err := eng.Generate(context.Background(), Tokens(prompt), SamplingParams{MaxTokens: 12, Temperature: 0.8, Seed: u64(77)})
	if err != nil {
		t.Fatal(err)
	}
	want, err := rawGenerate(model, prompt, 12, 77, 0.8)
	if err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(got.Tokens[0]) != fmt.Sprint(want) {
		t.Fatalf("engine %v, C API %v", got.Tokens[0], want)
	}
}

func TestConcurrentGoroutinesEqualAloneAndStreamingText(t *testing.T) {
	eng, err := NewEngine(tinyModel(t))
	if err != nil {
		t.Fatal(err)
	}
	defer eng.Close()
	prompts := []string{"one two", "three four five", "six", "seven eight nine ten"}
	sp := SamplingParams{MaxTokens: 10, Temperature: 0.9, Seed: u64(4)}
	alone := make([]*Output, len(prompts))
	for i, p := range prompts {
		if alone[i], err = eng.Generate(context.Background(), Text(p), sp); err != nil {
			t.Fatal(err)
		}
	}
	var wg sync.WaitGroup
	errs := make(chan error, len(prompts))
	for i, p := range prompts {
		wg.Add(1)
		go func(i int, p string) {
			defer wg.Done()
			ch, err := eng.Stream(context.Background(), Text(p), sp)
			if err != nil {
				errs <- err
				return
			}
			var text strings.Builder
			var toks []int32
			for ev := range ch {
				text.WriteString(ev.Text)
				if ev.Token >= 0 {
					toks = append(toks, ev.Token)
				}
			}
			if fmt.Sprint(toks) != fmt.Sprint(alone[i].Tokens[0]) {
				errs <- fmt.Errorf("prompt %d batched %v, alone %v", i, toks, alone[i].Tokens[0])
			}
			if text.String() != alone[i].Text[0] {
				errs <- fmt.Errorf("prompt %d streamed text %q != final %q", i, text.String(), alone[i].Text[0])
			}
		}(i, p)
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

func TestContextCancelsTheRequest(t *testing.T) {
	eng, err := NewEngine(tinyModel(t))
	if err != nil {
		t.Fatal(err)
	}
	defer eng.Close()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ch, err := eng.Stream(ctx, Tokens([]int32{1, 2, 3}), SamplingParams{MaxTokens: 2000, IgnoreEOS: true, Temperature: 1})
	if err != nil {
		t.Fatal(err)
	}
	// Cancelled after the third event, not after a sleep: a timer raced
	// the tiny model's steps (2000 of them can take under 30 ms).
	n, last := 0, ""
	for ev := range ch {
		n++
		last = ev.FinishReason
		if n == 3 {
			cancel()
		}
	}
	if last != "cancelled" || n >= 2000 {
		t.Fatalf("last finish reason %q after %d events", last, n)
	}
}

// The case that broke bindings before per-object errors: eight goroutines
// failing at once, each must see its own message.
func TestErrorsUnderConcurrencyCarryTheirOwnMessage(t *testing.T) {
	eng, err := NewEngine(tinyModel(t))
	if err != nil {
		t.Fatal(err)
	}
	defer eng.Close()
	var wg sync.WaitGroup
	var mu sync.Mutex
	wrong := 0
	for g := 0; g < 8; g++ {
		wg.Add(1)
		go func(g int) {
			defer wg.Done()
			for i := 0; i < 300; i++ {
				bad := int32(1<<20 + g*1000 + i)
				_, err := eng.Generate(context.Background(), Tokens([]int32{bad}), SamplingParams{MaxTokens: 2})
				var qe *Error
				if !errors.As(err, &qe) || qe.Status != ErrTokenOutOfRange || !strings.Contains(qe.Message, fmt.Sprint(bad)) {
					mu.Lock()
					wrong++
					mu.Unlock()
				}
			}
		}(g)
	}
	wg.Wait()
	if wrong != 0 {
		t.Fatalf("%d wrong or missing error messages in 2400 calls", wrong)
	}
}

func cpuSeconds() float64 {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return float64(ru.Utime.Sec+ru.Stime.Sec) + 1e-6*float64(ru.Utime.Usec+ru.Stime.Usec)
}

func TestIdleEngineSleepsAndWakesOnSubmit(t *testing.T) {
	eng, err := NewEngine(tinyModel(t))
	if err != nil {
		t.Fatal(err)
	}
	defer eng.Close()
	c0 := cpuSeconds()
	time.Sleep(500 * time.Millisecond)
	if idle := cpuSeconds() - c0; idle > 0.05 {
		t.Fatalf("an idle engine used %.3f s of CPU in 0.5 s", idle)
	}
	t0 := time.Now()
	ch, err := eng.Stream(context.Background(), Tokens([]int32{4, 5}), SamplingParams{MaxTokens: 1})
	if err != nil {
		t.Fatal(err)
	}
	<-ch
	// woken by the submit, not by qw_engine_wait's 200 ms poll of the quit flag
	if d := time.Since(t0); d > 150*time.Millisecond {
		t.Fatalf("first event %v after the submit", d)
	}
	for range ch {
	}
	if _, err := eng.Generate(context.Background(), Text("x"), SamplingParams{Temperature: -1}); err == nil {
		t.Fatal("a negative temperature was accepted")
	} else if !strings.Contains(err.Error(), "QW_REQ_TEMPERATURE") && !strings.Contains(err.Error(), "temperature") {
		t.Fatalf("error does not name the option: %v", err)
	}
}
