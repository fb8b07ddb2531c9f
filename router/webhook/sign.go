package webhook

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"strconv"
)

// sign returns the signature header's value for body:
//
//	t=<unix seconds>,v1=<hex of HMAC-SHA256(secret, "<unix seconds>.<body>")>
//
// The time is signed with the body, so a receiver that rejects old timestamps cannot
// be fed a request replayed later. docs/configuration.md shows how to verify it.
func (d *Driver) sign(body []byte) string {
	t := strconv.FormatInt(d.now().Unix(), 10)
	mac := hmac.New(sha256.New, d.secret)
	mac.Write([]byte(t))
	mac.Write([]byte{'.'})
	mac.Write(body)
	return "t=" + t + ",v1=" + hex.EncodeToString(mac.Sum(nil))
}
