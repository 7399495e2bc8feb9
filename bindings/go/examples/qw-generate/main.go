// qw-generate in Go: examples/qw-generate's behaviour through the Go
// binding (text in, text out, chat, streaming, several requests at once).
//
//	go run ./examples/qw-generate --model DIR --prompt "Why is the sky blue?" [--chat [--no-think]]
//	    [--num-requests N] [--max-tokens N] [--temperature T] [--seed S] [--device cpu]
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"sync"
	"time"

	"github.com/qwinfer/qwinfer/bindings/go/qwinfer"
)

func main() {
	model := flag.String("model", "", "Hugging Face model directory (required)")
	prompt := flag.String("prompt", "", "prompt text (required)")
	chat := flag.Bool("chat", false, "send the prompt as a user message (Qwen3 chat template)")
	noThink := flag.Bool("no-think", false, "with --chat: answer without thinking first")
	n := flag.Int("num-requests", 1, "concurrent requests (one goroutine each)")
	maxTokens := flag.Int("max-tokens", 64, "tokens to generate")
	temperature := flag.Float64("temperature", 1.0, "0 = greedy")
	seed := flag.Uint64("seed", 0, "sampling seed (0 = engine's)")
	device := flag.String("device", "cpu", `"cpu" or "cuda:N"`)
	flag.Parse()
	if *model == "" || *prompt == "" {
		flag.Usage()
		os.Exit(2)
	}
	eng, err := qwinfer.NewEngine(*model, qwinfer.WithDevice(*device))
	if err != nil {
		fmt.Fprintln(os.Stderr, "qw-generate:", err)
		os.Exit(1)
	}
	defer eng.Close()
	p := qwinfer.Text(*prompt)
	if *chat {
		p = qwinfer.Chat(qwinfer.Message{Role: "user", Content: *prompt})
		p.NoThink = *noThink
	}
	sp := qwinfer.SamplingParams{MaxTokens: *maxTokens, Temperature: *temperature}
	if *seed != 0 {
		sp.Seed = seed
	}
	start := time.Now()
	if *n == 1 { // stream the text as it comes
		ch, err := eng.Stream(context.Background(), p, sp)
		if err != nil {
			fmt.Fprintln(os.Stderr, "qw-generate:", err)
			os.Exit(1)
		}
		tokens := 0
		for ev := range ch {
			fmt.Print(ev.Text)
			if ev.Token >= 0 {
				tokens++
			}
		}
		fmt.Println()
		fmt.Fprintf(os.Stderr, "1 request: %d tokens in %.2f s\n", tokens, time.Since(start).Seconds())
		return
	}
	var wg sync.WaitGroup
	outs := make([]*qwinfer.Output, *n)
	errs := make([]error, *n)
	for i := 0; i < *n; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			outs[i], errs[i] = eng.Generate(context.Background(), p, sp)
		}(i)
	}
	wg.Wait()
	tokens := 0
	for i := range outs {
		if errs[i] != nil {
			fmt.Fprintf(os.Stderr, "qw-generate: request %d: %v\n", i, errs[i])
			os.Exit(1)
		}
		tokens += len(outs[i].Tokens[0])
		fmt.Printf("[req %d] %s: %q\n", i, outs[i].FinishReason[0], outs[i].Text[0])
	}
	fmt.Fprintf(os.Stderr, "%d requests: %d tokens in %.2f s\n", *n, tokens, time.Since(start).Seconds())
}
