package audit

import (
	"context"
	"fmt"
	"regexp"
	"strconv"
	"strings"

	"github.com/jobplane/jobplane/internal/store"
)

// Reader is what Verify reads.
type Reader interface {
	AuditChainList(ctx context.Context, after int64, limit int) ([]*store.AuditSeal, error)
	AuditScan(ctx context.Context, p *store.AuditScanParams) ([]*store.AuditEvent, error)
}

// Checkpoint is a chain head kept outside the database: the sequence number
// and hash of a link, written "SEQ:HASH".
type Checkpoint struct {
	Seq  int64  `json:"seq"`
	Hash string `json:"hash"`
}

func (c Checkpoint) String() string { return strconv.FormatInt(c.Seq, 10) + ":" + c.Hash }

var hashRE = regexp.MustCompile(`^[0-9a-f]{64}$`)

// ParseCheckpoint reads "SEQ:HASH".
func ParseCheckpoint(s string) (Checkpoint, error) {
	seq, hash, ok := strings.Cut(strings.TrimSpace(s), ":")
	n, err := strconv.ParseInt(seq, 10, 64)
	if !ok || err != nil || n <= 0 || !hashRE.MatchString(hash) {
		return Checkpoint{}, fmt.Errorf("checkpoint %q: want SEQ:HASH, a positive sequence number and 64 lower-case hex digits", s)
	}
	return Checkpoint{Seq: n, Hash: hash}, nil
}

// Break is the first event where the chain does not hold.
type Break struct {
	Seq    int64  `json:"seq"`
	Reason string `json:"reason"`
}

// Report is the outcome of Verify.
type Report struct {
	OK bool `json:"ok"`
	// Sealed counts the links checked before the break (all of them if OK).
	Sealed int64 `json:"sealed"`
	// Head is the last link checked.
	Head Checkpoint `json:"head"`
	// Unsealed counts events after the head, waiting for the sealer.
	Unsealed int64 `json:"unsealed"`
	// Checkpoint is the external head checked against, if any.
	Checkpoint *Checkpoint `json:"checkpoint,omitempty"`
	Broken     *Break      `json:"broken,omitempty"`
}

const page = 1000

// Verify recomputes the chain from the stored events and links, in sequence
// order, and names the first event that does not fit. With a checkpoint it
// also requires the link at cp.Seq to exist with cp.Hash, which catches a
// consistent rewrite or a truncated tail.
//
// Links are read before the events they cover: an event is committed before
// its link, so every link read has its event visible to the next read, and a
// sealer running meanwhile cannot make a sound chain look broken.
func Verify(ctx context.Context, r Reader, cp *Checkpoint) (*Report, error) {
	ctx = store.WithSystem(ctx, "audit verify") // the chain covers every tenant
	rep := &Report{Head: Checkpoint{Hash: Genesis}, Checkpoint: cp}
	fail := func(seq int64, format string, args ...any) (*Report, error) {
		rep.Broken = &Break{Seq: seq, Reason: fmt.Sprintf(format, args...)}
		return rep, nil
	}
	prev, after := Genesis, int64(0)
	cpSeen := false
	for {
		links, err := r.AuditChainList(ctx, after, page)
		if err != nil {
			return nil, err
		}
		if len(links) == 0 {
			break
		}
		last := links[len(links)-1].Seq
		var evs []*store.AuditEvent
		for from := after; ; {
			batch, err := r.AuditScan(ctx, &store.AuditScanParams{After: from, UpTo: last, Limit: page})
			if err != nil {
				return nil, err
			}
			evs = append(evs, batch...)
			if len(batch) < page {
				break
			}
			from = batch[len(batch)-1].Seq
		}
		i := 0
		for _, l := range links {
			if cp != nil && !cpSeen && cp.Seq < l.Seq {
				return fail(cp.Seq, "the checkpointed event %d is not in the chain (deleted, or the chain was rewritten)", cp.Seq)
			}
			if i < len(evs) && evs[i].Seq < l.Seq {
				return fail(evs[i].Seq, "event %d is not sealed although later events are: it was inserted after sealing, or its link was deleted", evs[i].Seq)
			}
			if i >= len(evs) || evs[i].Seq > l.Seq {
				return fail(l.Seq, "event %d was sealed but is missing: deleted, or its sequence number changed", l.Seq)
			}
			e := evs[i]
			i++
			if l.PrevHash != prev {
				return fail(l.Seq, "the link of event %d does not follow the previous link (event %d): a link or an event before it was deleted or reordered", l.Seq, rep.Head.Seq)
			}
			if got := Link(prev, e); got != l.Hash {
				return fail(l.Seq, "event %d does not match its sealed hash: its content or position was changed", l.Seq)
			}
			if cp != nil && l.Seq == cp.Seq {
				cpSeen = true
				if l.Hash != cp.Hash {
					return fail(l.Seq, "event %d does not match the checkpoint %s: the chain up to it was rewritten", l.Seq, cp)
				}
			}
			prev, after = l.Hash, l.Seq
			rep.Sealed++
			rep.Head = Checkpoint{Seq: l.Seq, Hash: l.Hash}
		}
		if i < len(evs) {
			return fail(evs[i].Seq, "event %d is not sealed although later events are: it was inserted after sealing, or its link was deleted", evs[i].Seq)
		}
	}
	if cp != nil && !cpSeen {
		return fail(cp.Seq, "the chain ends at event %d, before the checkpointed event %d: its tail was truncated", rep.Head.Seq, cp.Seq)
	}
	for from := after; ; {
		batch, err := r.AuditScan(ctx, &store.AuditScanParams{After: from, Limit: page})
		if err != nil {
			return nil, err
		}
		rep.Unsealed += int64(len(batch))
		if len(batch) < page {
			break
		}
		from = batch[len(batch)-1].Seq
	}
	rep.OK = true
	return rep, nil
}
