package audit

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"time"

	"github.com/jobplane/jobplane/internal/clock"
	"github.com/jobplane/jobplane/internal/store"
)

// DefaultBatch bounds the events one sealing transaction links.
const DefaultBatch = 1000

// Sealer links committed events into the chain. It is safe to run one in
// every replica: they take turns (store.AuditSealLock) and a link per
// sequence number is unique.
type Sealer struct {
	st    store.Store
	log   *slog.Logger
	batch int

	clock clock.Clock

	mu      sync.Mutex
	pending *store.AuditMark // horizon drawn, not yet reached
	head    store.AuditSeal  // last link this sealer wrote or saw
	logged  time.Time        // when the head was last logged at info level

	// noHorizon seals up to the highest visible event without waiting for
	// the horizon. Only tests set it, to show that the horizon is needed.
	noHorizon bool
}

// NewSealer returns a Sealer over a store.
func NewSealer(st store.Store, log *slog.Logger) *Sealer {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Sealer{st: st, log: log, batch: DefaultBatch, clock: clock.Real{}}
}

// Seal links the events below the current horizon. It never waits: a
// horizon that running transactions still hold back is kept and checked
// again on the next call (the server calls Seal every second), so a sealed
// event lags its commit by about one interval.
func (s *Sealer) Seal(ctx context.Context) (int, error) {
	ctx = store.WithSystem(ctx, "audit sealer") // one chain over every tenant
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.noHorizon {
		return s.sealUpTo(ctx, 0)
	}
	if s.pending == nil {
		m, err := s.st.AuditHorizon(ctx, s.head.Seq)
		if err != nil {
			return 0, err
		}
		if m.Seq <= s.head.Seq {
			return 0, nil // nothing new since this sealer's last round
		}
		s.pending = &m
	}
	ok, err := s.st.AuditHorizonReached(ctx, *s.pending)
	if err != nil || !ok {
		return 0, err
	}
	upTo := s.pending.Seq
	s.pending = nil
	if upTo == 0 {
		return 0, nil
	}
	return s.sealUpTo(ctx, upTo)
}

// SealAll waits until every event committed before the call can be sealed,
// and seals it: for tests, for `verify` right after a change, and at
// shutdown. It polls the horizon every few milliseconds until ctx ends.
func (s *Sealer) SealAll(ctx context.Context) (int, error) {
	ctx = store.WithSystem(ctx, "audit sealer")
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.noHorizon {
		return s.sealUpTo(ctx, 0)
	}
	m, err := s.st.AuditHorizon(ctx, 0)
	if err != nil {
		return 0, err
	}
	for {
		ok, err := s.st.AuditHorizonReached(ctx, m)
		if err != nil {
			return 0, err
		}
		if ok {
			break
		}
		t := time.NewTimer(5 * time.Millisecond)
		select {
		case <-ctx.Done():
			t.Stop()
			return 0, ctx.Err()
		case <-t.C:
		}
	}
	if s.pending != nil && s.pending.Seq <= m.Seq {
		s.pending = nil // reached too
	}
	if m.Seq == 0 {
		return 0, nil
	}
	return s.sealUpTo(ctx, m.Seq)
}

// logHead logs the new head, an external checkpoint for whoever ships the
// logs elsewhere: at info level at most once a minute, else at debug level,
// so that a busy server does not log every second.
func (s *Sealer) logHead(ctx context.Context, n int, head store.AuditSeal) {
	level := slog.LevelDebug
	if now := s.clock.Now(); now.Sub(s.logged) >= time.Minute {
		level, s.logged = slog.LevelInfo, now
	}
	s.log.Log(ctx, level, "audit: sealed", "events", n, "head_seq", head.Seq, "head_hash", head.Hash)
}

// Head is the last link this sealer wrote or found (zero before the first
// round that saw one).
func (s *Sealer) Head() store.AuditSeal {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.head
}

// sealUpTo links events with Seq <= upTo (0: every visible event) in
// batches, one transaction each.
func (s *Sealer) sealUpTo(ctx context.Context, upTo int64) (int, error) {
	total := 0
	for {
		var links []store.AuditSeal
		var head store.AuditSeal
		err := s.st.InTx(ctx, func(tx store.Tx) error {
			links = links[:0]
			if err := tx.AuditSealLock(ctx); err != nil {
				return err
			}
			h, err := tx.AuditChainHead(ctx)
			switch {
			case errors.Is(err, store.ErrNotFound):
				head = store.AuditSeal{Hash: Genesis}
			case err != nil:
				return err
			default:
				head = *h
			}
			if upTo != 0 && head.Seq >= upTo {
				return nil
			}
			// Events at or below the head that are not linked are not
			// picked up here: the horizon guarantees the server wrote none,
			// and Verify reports them.
			evs, err := tx.AuditScan(ctx, &store.AuditScanParams{After: head.Seq, UpTo: upTo, Limit: s.batch})
			if err != nil {
				return err
			}
			prev := head.Hash
			for _, e := range evs {
				l := store.AuditSeal{Seq: e.Seq, PrevHash: prev, Hash: Link(prev, e)}
				links = append(links, l)
				prev = l.Hash
			}
			return tx.AuditSealAppend(ctx, links)
		})
		if err != nil {
			return total, err
		}
		if len(links) > 0 {
			head = links[len(links)-1]
		}
		s.head = head
		total += len(links)
		if len(links) < s.batch {
			if total > 0 {
				s.logHead(ctx, total, head)
			}
			return total, nil
		}
	}
}
