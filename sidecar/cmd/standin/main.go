// Command standin serves one provider's event-list API on this machine,
// so that claimd's gap detection and backfill
// (sidecar/docs/ingest.md#missed-events-gap-detection-and-backfill) can be
// tried without a Stripe, GitHub or Square account:
//
//	go run ./sidecar/cmd/standin -provider stripe -listen 127.0.0.1:12111 \
//	    -key "$STRIPE_EVENTS_KEY" -secret "$STRIPE_WEBHOOK_SECRET" \
//	    -deliver http://127.0.0.1:8080/ingest/stripe
//
// The API is the stand-in of package sidecar/internal/standin (Stripe's
// GET /v1/events, a GitHub hook's delivery log, Square's SearchEvents,
// each as the provider documents it; the docs are cited there). It is
// seeded with -events events, of which -missed were "never delivered";
// with -deliver it posts the others to claimd's ingest door, signed with
// -secret as the provider signs a delivery (the stand-in's own signers:
// Stripe-Signature t=…,v1=HMAC-SHA256(secret, "t.body"); GitHub
// X-Hub-Signature-256 sha256=HMAC-SHA256(secret, body); Square
// x-square-hmacsha256-signature base64 HMAC-SHA256(key, notification URL +
// body)). A scan of the source then finds the missed ones in the list and
// backfills them. A GitHub redelivery the scan asks for
// (POST …/attempts) is posted, signed, to the -deliver URL too.
//
// It also answers POST /forward with 200 and prints the event it got: a
// stand-in for n8n, to be the source's forward.url, so that a dispatch
// (and its X-Idempotency-Origin: backfill) can be seen without n8n.
//
// It is a toy: it accepts the one read key it was given or generated (as
// a Bearer token), listens on a loopback address unless -allow-remote
// says otherwise, and keeps everything in memory. It prints the read key
// only when it generated it, and never prints the webhook secret. It
// serves until interrupted (SIGINT, SIGTERM).
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	os.Exit(run(ctx, os.Args[1:], os.Stdout, os.Stderr))
}

// run parses args, serves until ctx ends and returns the exit status: 0,
// 1 when it could not start, 2 for bad flags (the usage is printed).
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	cfg, err := parseFlags(args, stderr)
	if errors.Is(err, errHelp) {
		return 0
	}
	if err != nil {
		fmt.Fprintf(stderr, "standin: %v\n(standin -h lists the flags)\n", err)
		return 2
	}
	s, err := start(cfg, stdout, stderr)
	if err != nil {
		fmt.Fprintf(stderr, "standin: %v\n", err)
		return 1
	}
	defer s.close()
	s.printInfo()
	if cfg.deliver != "" {
		s.deliverAll(ctx)
	}
	fmt.Fprintln(stdout, "serving until interrupted (Ctrl-C)")
	select {
	case <-ctx.Done():
	case err := <-s.served:
		fmt.Fprintf(stderr, "standin: %v\n", err)
		return 1
	}
	return 0
}
