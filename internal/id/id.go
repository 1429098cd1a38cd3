// Package id makes the opaque, time-ordered identifiers of runs, attempts and
// runners: a kind prefix and a ULID (48-bit millisecond time, 80 random bits,
// Crockford base32), so that sorting by ID sorts by creation time.
package id

import (
	"crypto/rand"
	"encoding/base64"
	"encoding/binary"
	"time"
)

const crockford = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"

// Prefixes of the identifier kinds.
const (
	Run       = "run_"
	Attempt   = "att_"
	Runner    = "rnr_"
	Principal = "prn_"
	Token     = "tok_"
	Tenant    = "tnt_"
)

// New returns prefix + a ULID for time t.
func New(prefix string, t time.Time) string {
	var b [16]byte
	binary.BigEndian.PutUint64(b[:8], uint64(t.UnixMilli())<<16)
	if _, err := rand.Read(b[6:]); err != nil {
		panic(err) // crypto/rand never fails on supported platforms
	}
	return prefix + encode(b)
}

func encode(b [16]byte) string {
	var out [26]byte
	// 128 bits as 26 base32 digits: the first digit carries the top 3 bits.
	hi := binary.BigEndian.Uint64(b[:8])
	lo := binary.BigEndian.Uint64(b[8:])
	for i := 25; i >= 0; i-- {
		out[i] = crockford[lo&31]
		lo = lo>>5 | hi<<59
		hi >>= 5
	}
	return string(out[:])
}

// Secret returns n random bytes encoded as base64url without padding, for
// bearer tokens, lease tokens and capabilities.
func Secret(n int) string {
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		panic(err)
	}
	return base64.RawURLEncoding.EncodeToString(b)
}

// Seq makes identifiers that sort in the order they were made, even within
// one millisecond (where New's random bits would order them at random): a
// batch's items keep their order wherever identifiers break ties. The zero
// Seq is ready; it is not safe for concurrent use.
type Seq struct {
	last [16]byte
	ok   bool
}

// Next returns an identifier for time t greater than the last one this Seq
// made: a new random one when t's millisecond is later, else the last one
// plus one.
func (s *Seq) Next(prefix string, t time.Time) string {
	ms := uint64(t.UnixMilli()) << 16
	if !s.ok || ms > binary.BigEndian.Uint64(s.last[:8])&^0xffff {
		binary.BigEndian.PutUint64(s.last[:8], ms)
		if _, err := rand.Read(s.last[6:]); err != nil {
			panic(err)
		}
		// Room to count up in the low bits without reaching the next
		// millisecond's.
		s.last[6] &= 0x7f
		s.ok = true
		return prefix + encode(s.last)
	}
	lo := binary.BigEndian.Uint64(s.last[8:]) + 1
	binary.BigEndian.PutUint64(s.last[8:], lo)
	if lo == 0 {
		hi := binary.BigEndian.Uint64(s.last[:8]) + 1
		binary.BigEndian.PutUint64(s.last[:8], hi)
	}
	return prefix + encode(s.last)
}
