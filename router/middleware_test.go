package router_test

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/outboxd/outboxd/router"
)

func TestMiddlewaresWrapEachDriverCallOuterFirstUnderTheOrderedChunking(t *testing.T) {
	t.Parallel()
	var calls []string
	note := func(name string) router.Middleware {
		return func(to router.Destination, next router.Sender) router.Sender {
			return func(ctx context.Context, msgs []router.Message) []error {
				var topics []string
				for _, m := range msgs {
					topics = append(topics, m.Topic)
				}
				calls = append(calls, fmt.Sprintf("%s %s/%s ordered=%t %s", name, to.Stream, to.Driver, router.KeyOrdered(ctx), strings.Join(topics, ",")))
				return next(ctx, msgs)
			}
		}
	}
	d := &topicsDriver{}
	r, err := router.New([]router.Route{{Stream: "orders", DriverName: "d", Driver: d, TopicPrefix: "shop."}},
		router.WithMiddleware(note("outer"), note("inner")))
	if err != nil {
		t.Fatal(err)
	}
	p, err := r.Publisher("orders")
	if err != nil {
		t.Fatal(err)
	}
	big := []byte(strings.Repeat("x", router.OrderedChunkBytes/2+1)) // two of these need two calls
	p.PublishOrdered(context.Background(), []router.Message{{ID: 1, Topic: "a", Payload: big}, {ID: 2, Topic: "b", Payload: big}})
	p.Publish(context.Background(), []router.Message{{ID: 3, Topic: "c"}})
	want := []string{
		"outer orders/d ordered=true shop.a", "inner orders/d ordered=true shop.a",
		"outer orders/d ordered=true shop.b", "inner orders/d ordered=true shop.b",
		"outer orders/d ordered=false shop.c", "inner orders/d ordered=false shop.c",
	}
	if strings.Join(calls, "\n") != strings.Join(want, "\n") {
		t.Fatalf("middleware calls:\n%s\nwant:\n%s", strings.Join(calls, "\n"), strings.Join(want, "\n"))
	}
}

func TestAMiddlewareThatLosesAnswersGetsEveryMessageARetryableError(t *testing.T) {
	t.Parallel()
	lose := func(_ router.Destination, next router.Sender) router.Sender {
		return func(ctx context.Context, msgs []router.Message) []error { return next(ctx, msgs)[:1] }
	}
	r, err := router.New([]router.Route{{Stream: "orders", DriverName: "d", Driver: &topicsDriver{}}}, router.WithMiddleware(lose))
	if err != nil {
		t.Fatal(err)
	}
	p, _ := r.Publisher("orders")
	errs := p.Publish(context.Background(), make([]router.Message, 3))
	if len(errs) != 3 {
		t.Fatalf("%d results for 3 messages", len(errs))
	}
	for i, err := range errs {
		if router.KindOf(err) != router.KindRetryable || err == nil {
			t.Fatalf("message %d: %v; want a retryable error", i, err)
		}
	}
}
