package store

import (
	"context"
	"errors"
	"sync"
	"time"
)

// ErrReplay refuses a transaction whose signed request's nonce was
// recorded before (InTxNonce): the request is a replay, and nothing of it
// ran.
var ErrReplay = errors.New("nonce already recorded")

// Nonce is a signed request's nonce, for NonceInsertMany.
type Nonce struct {
	RunnerID  string
	Nonce     string
	ExpiresAt time.Time
}

// NonceNew maps the rows a batch insert returned as new (keys runner+"\x00"+
// nonce) to one flag per requested nonce: the first occurrence of a key that
// was inserted is new, every other occurrence is not.
func NonceNew(nonces []Nonce, inserted map[string]bool) []bool {
	out := make([]bool, len(nonces))
	for i, n := range nonces {
		k := n.RunnerID + "\x00" + n.Nonce
		if inserted[k] {
			out[i] = true
			delete(inserted, k)
		}
	}
	return out
}

// PendingNonce is the nonce of a verified signed request that is not
// recorded yet: the request's first committed transaction records it
// (InTxNonce), sparing the request a commit of its own, and whatever the
// request answers without such a transaction records it on its own first
// (Record). One request's transactions run one after another.
type PendingNonce struct {
	Nonce

	mu       sync.Mutex
	recorded bool
}

// NewPendingNonce is a pending nonce of n.
func NewPendingNonce(n Nonce) *PendingNonce { return &PendingNonce{Nonce: n} }

// Recorded reports whether a committed transaction holds the nonce.
func (p *PendingNonce) Recorded() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.recorded
}

// SetRecorded is called once a transaction that inserted the nonce committed.
func (p *PendingNonce) SetRecorded() {
	p.mu.Lock()
	p.recorded = true
	p.mu.Unlock()
}

// NonceInserter is what Record inserts a nonce with (a Store, or a Tx).
type NonceInserter interface {
	NonceInsert(ctx context.Context, runnerID, nonce string, expiresAt time.Time) error
}

// Record inserts the nonce through q unless a transaction recorded it:
// ErrReplay when it is known.
func (p *PendingNonce) Record(ctx context.Context, q NonceInserter) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.recorded {
		return nil
	}
	err := q.NonceInsert(ctx, p.RunnerID, p.Nonce.Nonce, p.ExpiresAt)
	if errors.Is(err, ErrAlreadyExists) {
		return ErrReplay
	}
	if err != nil {
		return err
	}
	p.recorded = true
	return nil
}

// InTxWithNonce is the InTxNonce of a store whose transactions each serve
// one call: st.InTx, whose transaction inserts n first when it is pending.
// A known nonce is ErrReplay, before fn runs.
func InTxWithNonce(ctx context.Context, st interface {
	InTx(ctx context.Context, fn func(tx Tx) error) error
}, n *PendingNonce, fn func(tx Tx) error) error {
	if n == nil || n.Recorded() {
		return st.InTx(ctx, fn)
	}
	err := st.InTx(ctx, func(tx Tx) error {
		err := tx.NonceInsert(ctx, n.RunnerID, n.Nonce.Nonce, n.ExpiresAt)
		if errors.Is(err, ErrAlreadyExists) {
			return ErrReplay
		}
		if err != nil {
			return err
		}
		return fn(tx)
	})
	if err == nil {
		n.SetRecorded()
	}
	return err
}
