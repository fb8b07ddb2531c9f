package pgdsn_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/outboxd/outboxd/internal/pgdsn"
)

func TestRedactReplacesOnlyPasswords(t *testing.T) {
	t.Parallel()
	cases := []struct{ name, in, want string }{
		{"A URL password is replaced.", "postgres://app:pw-1@db:5432/app", "postgres://app:[REDACTED]@db:5432/app"},
		{"A URL without a password is kept.", "postgres://app@db/app?sslmode=require", "postgres://app@db/app?sslmode=require"},
		{"A password holding @ and / is replaced whole.", "postgres://app:x@y/z@db/app", "postgres://app:[REDACTED]@db/app"},
		{"Password query parameters are replaced.", "postgresql://db/app?user=u&password=pw-2&sslpassword=pw-3#f", "postgresql://db/app?user=u&password=[REDACTED]&sslpassword=[REDACTED]#f"},
		{"A key=value password is replaced.", "host=db password=pw-4 dbname=app", "host=db password=[REDACTED] dbname=app"},
		{"A quoted key=value password is replaced with its quotes.", "host=db password = 'p w\\'5' user=u", "host=db password = [REDACTED] user=u"},
		{"A key=value DSN that does not parse is replaced whole.", "host=db password=p w6", "[REDACTED]"},
		{"An empty DSN stays empty.", "", ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			if got := pgdsn.Redact(tc.in); got != tc.want {
				t.Errorf("Redact(%q) = %q, want %q", tc.in, got, tc.want)
			}
		})
	}
}

func TestRedactURLTreatsAUserWithoutPasswordAsSecretOnlyWhenAsked(t *testing.T) {
	t.Parallel()
	if got := pgdsn.RedactURL("nats://tok@n2:4222", pgdsn.Mask, true); got != "nats://[REDACTED]@n2:4222" {
		t.Errorf("a token user: %q", got)
	}
	if got := pgdsn.RedactURL("postgres://app@db/app", pgdsn.Mask, false); got != "postgres://app@db/app" {
		t.Errorf("a plain user: %q", got)
	}
}

func TestParseKVSpansEachValueAsWritten(t *testing.T) {
	t.Parallel()
	s := `host=db port = 5433 sslmode='verify-full'`
	pairs, err := pgdsn.ParseKV(s)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for _, p := range pairs {
		got[p.Key] = pgdsn.Value(s[p.Start:p.End])
	}
	if got["host"] != "db" || got["port"] != "5433" || got["sslmode"] != "verify-full" {
		t.Fatalf("pairs %v", got)
	}
	if _, err := pgdsn.ParseKV("host"); err == nil {
		t.Fatal("a key without = parsed")
	}
}

func TestRedactParseErrorHidesPasswordsPgxMisses(t *testing.T) {
	t.Parallel()
	for _, dsn := range []string{
		"host=db password = kv-pw-3c1d sslmode=bogus",
		`host=db password='it\'s kv-pw-3c1d' sslmode=bogus`,
		"postgres://app:url-pw-77aa@db/app?sslmode=bogus",
	} {
		_, err := pgx.ParseConfig(dsn)
		if err == nil {
			t.Fatalf("pgx parsed %q", dsn)
		}
		safe := pgdsn.RedactParseError(err)
		for _, secret := range []string{"kv-pw-3c1d", "url-pw-77aa"} {
			if strings.Contains(safe.Error(), secret) {
				t.Errorf("RedactParseError(%q) = %q shows %q", dsn, safe, secret)
			}
		}
		if !strings.Contains(safe.Error(), "sslmode") {
			t.Errorf("RedactParseError(%q) = %q; want pgx's reason kept", dsn, safe)
		}
	}
	plain := errors.New("not a parse error")
	if !errors.Is(pgdsn.RedactParseError(plain), plain) {
		t.Fatal("another error was changed")
	}
}
