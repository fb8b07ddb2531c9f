package kafka

import (
	"errors"
	"strings"
	"testing"

	"github.com/segmentio/kafka-go"

	"github.com/outboxd/outboxd/internal/testenv"
	"github.com/outboxd/outboxd/router"
)

func TestCheckTopicAppliesKafkasRulesForTopicNames(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name  string
		topic string
		want  string // "" when accepted
	}{
		{"letters, digits, dots, dashes and underscores are accepted", "Orders.v1_created-EU", ""},
		{"a name of 249 characters is accepted", strings.Repeat("a", 249), ""},
		{"a name of 250 characters is refused", strings.Repeat("a", 250), "at most 249 characters"},
		{`"." is refused`, ".", `"." and ".." are reserved`},
		{`".." is refused`, "..", `"." and ".." are reserved`},
		{"a slash is refused", "a/b", `'/' at byte 2`},
		{"a space is refused", "a b", `' ' at byte 2`},
		{"a colon is refused", "a:b", `':' at byte 2`},
		{"a non-ASCII letter is refused, named as a letter", "aö", `'ö' at byte 2`},
		{"a control character is refused", "a\x01", `'\x01' at byte 2`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			err := checkTopic(c.topic)
			switch {
			case c.want == "" && err != nil:
				t.Fatalf("refused: %v", err)
			case c.want != "" && (!errors.Is(err, kafka.InvalidTopic) || !strings.Contains(err.Error(), c.want)):
				t.Fatalf("error %v; want InvalidTopic saying %q", err, c.want)
			case err != nil && len(err.Error()) > 500:
				t.Fatalf("the error quotes the whole name: %d bytes", len(err.Error()))
			}
		})
	}
}

func TestAnInvalidTopicFailsAloneAndPermanentlyWhileItsBatchIsWritten(t *testing.T) {
	t.Parallel()
	k := testenv.NewKafka(t, 1, "events")
	d := newDriver(t, testConfig(k.Addr()))
	msgs := numbered("events", 4, "a")
	msgs[1].Topic = "events/bad"
	msgs[2].Topic = strings.Repeat("e", 300)
	errs := d.Publish(testCtx(t), msgs)
	for i, err := range errs {
		switch i {
		case 1, 2:
			if router.KindOf(err) != router.KindPermanent || !errors.Is(err, kafka.InvalidTopic) {
				t.Fatalf("message %d: %v (%s); want a permanent INVALID_TOPIC", i, err, router.KindOf(err))
			}
		default:
			if err != nil {
				t.Fatalf("message %d, to a good topic: %v", i, err)
			}
		}
	}
}

func TestATooLargeMessageSaysWhichPartIsLarge(t *testing.T) {
	t.Parallel()
	k := testenv.NewKafka(t, 1, "events")
	d := newDriver(t, testConfig(k.Addr()))
	msgs := numbered("events", 2, "a")
	msgs[0].Key = []byte(strings.Repeat("k", maxRequestBytes))
	errs := d.Publish(testCtx(t), msgs)
	if errs[1] != nil || router.KindOf(errs[0]) != router.KindPermanent ||
		!strings.Contains(errs[0].Error(), "(key 1047552, value 9, headers 51)") {
		t.Fatalf("errors %v", errs)
	}
}
