package postgres

import (
	"encoding/binary"
	"sync"

	"github.com/outboxd/outboxd/router"
)

// The element types of the insert's arrays (pg_type.oid).
const (
	oidBytea = 17
	oidInt8  = 20
	oidText  = 25
)

// binaryParams says that every parameter of the insert is in binary format.
var binaryParams = []int16{1, 1, 1, 1, 1, 1, 1}

// noRows are the insert's parameters for no message: seven empty arrays.
var noRows = func() [][]byte {
	params := make([][]byte, 7)
	for p, oid := range []uint32{oidText, oidInt8, oidText, oidText, oidBytea, oidText, oidBytea} {
		params[p] = binary.BigEndian.AppendUint32(nil, 0) // no dimensions: empty
		params[p] = binary.BigEndian.AppendUint32(params[p], 0)
		params[p] = binary.BigEndian.AppendUint32(params[p], oid)
	}
	return params
}()

// appendArrays appends to buf the seven array parameters of the insert for the messages
// msgs[i], i in idx, in that order, in PostgreSQL's binary array format (array_recv):
// message_id text[], outbox_id bigint[], stream text[], topic text[], key bytea[]
// (NULL for no key), headers text[] (JSON, cast to jsonb by the statement) and payload
// bytea[] (empty for none). It returns buf and the parameters, slices of it.
func appendArrays(buf []byte, msgs []router.Message, idx []int) ([]byte, [][]byte) {
	var bounds [8]int
	bounds[0] = len(buf)
	texts := func(col int, value func(m *router.Message) string) {
		buf = appendArrayHeader(buf, oidText, len(idx), false)
		for _, i := range idx {
			v := value(&msgs[i])
			buf = binary.BigEndian.AppendUint32(buf, uint32(len(v)))
			buf = append(buf, v...)
		}
		bounds[col+1] = len(buf)
	}
	texts(0, (*router.Message).DedupID)

	buf = appendArrayHeader(buf, oidInt8, len(idx), false)
	for _, i := range idx {
		buf = binary.BigEndian.AppendUint32(buf, 8)
		buf = binary.BigEndian.AppendUint64(buf, uint64(msgs[i].ID))
	}
	bounds[2] = len(buf)

	texts(2, func(m *router.Message) string { return m.Stream })
	texts(3, func(m *router.Message) string { return m.Topic })

	noKey := false
	for _, i := range idx {
		noKey = noKey || msgs[i].Key == nil
	}
	buf = appendArrayHeader(buf, oidBytea, len(idx), noKey)
	for _, i := range idx {
		buf = appendBytes(buf, msgs[i].Key, true)
	}
	bounds[5] = len(buf)

	buf = appendArrayHeader(buf, oidText, len(idx), false)
	for _, i := range idx {
		at := len(buf)
		buf = append(buf, 0, 0, 0, 0)
		buf = appendHeaders(buf, &msgs[i])
		binary.BigEndian.PutUint32(buf[at:], uint32(len(buf)-at-4))
	}
	bounds[6] = len(buf)

	buf = appendArrayHeader(buf, oidBytea, len(idx), false)
	for _, i := range idx {
		buf = appendBytes(buf, msgs[i].Payload, false)
	}
	bounds[7] = len(buf)

	params := make([][]byte, 7)
	for p := range params {
		params[p] = buf[bounds[p]:bounds[p+1]:bounds[p+1]]
	}
	return buf, params
}

// appendArrayHeader appends the header of a one-dimensional array of n elements of
// type oid, numbered from 1.
func appendArrayHeader(buf []byte, oid uint32, n int, hasNull bool) []byte {
	null := uint32(0)
	if hasNull {
		null = 1
	}
	buf = binary.BigEndian.AppendUint32(buf, 1) // dimensions
	buf = binary.BigEndian.AppendUint32(buf, null)
	buf = binary.BigEndian.AppendUint32(buf, oid)
	buf = binary.BigEndian.AppendUint32(buf, uint32(n))
	return binary.BigEndian.AppendUint32(buf, 1) // lower bound
}

// appendBytes appends one bytea element: NULL for a nil b when nilIsNull, else its
// bytes.
func appendBytes(buf, b []byte, nilIsNull bool) []byte {
	if b == nil && nilIsNull {
		return binary.BigEndian.AppendUint32(buf, 0xFFFFFFFF) // -1: NULL
	}
	buf = binary.BigEndian.AppendUint32(buf, uint32(len(b)))
	return append(buf, b...)
}

// maxPooledBuffer bounds the buffers kept for the next call: a batch of large payloads
// should not pin its memory once it is sent.
const maxPooledBuffer = 4 << 20

// buffers are the drivers' encoding buffers, reused across calls.
type buffers struct{ pool sync.Pool }

func (b *buffers) get() []byte {
	if p, ok := b.pool.Get().(*[]byte); ok {
		return (*p)[:0]
	}
	return make([]byte, 0, 64<<10)
}

func (b *buffers) put(buf []byte) {
	if cap(buf) <= maxPooledBuffer {
		b.pool.Put(&buf)
	}
}
