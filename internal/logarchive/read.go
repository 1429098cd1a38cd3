package logarchive

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sort"

	"github.com/jobplane/jobplane/internal/artifact"
	"github.com/jobplane/jobplane/internal/protocol"
	"github.com/jobplane/jobplane/internal/store"
)

// Reader lists a run's lines from the database and, once the run ended,
// from its archives in the object store, merged in ID order.
type Reader struct {
	Store   store.Store
	Objects artifact.Storage // nil: nothing is archived
}

// Lines returns at most limit of run's lines with ID > after, in ID order.
// A failure of the object store is protocol.ErrUnavailable.
func (r *Reader) Lines(ctx context.Context, run *store.Run, after int64, limit int) ([]*store.LogLine, error) {
	if limit <= 0 {
		limit = 1000
	}
	// The database first, then the archives: a move commits its archive's
	// row before it deletes the lines, so a line missed here is found in
	// an archive listed after.
	out, err := r.Store.LogList(ctx, &store.LogListParams{RunID: run.ID, After: after, Limit: limit})
	if err != nil || r.Objects == nil || !run.State.Terminal() {
		return out, err // a run's logs move only once it ended
	}
	archives, err := r.Store.LogArchiveList(ctx, run.ID)
	if err != nil {
		return nil, err
	}
	for _, a := range archives {
		if a.LastID <= after {
			continue
		}
		if len(out) >= limit && a.FirstID > out[limit-1].ID {
			break // archives come by FirstID: no later one has a line on this page
		}
		lines, err := r.read(ctx, a, after, limit)
		if errors.Is(err, artifact.ErrNotFound) && r.gone(ctx, a) {
			continue // deleted by retention since it was listed
		}
		if err != nil {
			return nil, fmt.Errorf("logs of run %s: %s: %w", run.ID, err.Error(), protocol.ErrUnavailable)
		}
		out = merge(out, lines)
		if len(out) > limit {
			out = out[:limit]
		}
	}
	return out, nil
}

// gone says whether a is no longer served (retention is deleting it).
func (r *Reader) gone(ctx context.Context, a *store.LogArchive) bool {
	archives, err := r.Store.LogArchiveList(ctx, a.RunID)
	if err != nil {
		return false
	}
	for _, b := range archives {
		if b.AttemptID == a.AttemptID {
			return false
		}
	}
	return true
}

// read returns at most limit of a's lines with ID > after, reading only
// the members that can hold them.
func (r *Reader) read(ctx context.Context, a *store.LogArchive, after int64, limit int) ([]*store.LogLine, error) {
	bs := a.Blocks
	if len(bs) == 0 {
		return nil, fmt.Errorf("%w: %s has no blocks", ErrCorrupt, a.Key)
	}
	// The last member starting at or before after+1 may hold lines after it.
	i := max(sort.Search(len(bs), func(i int) bool { return bs[i].FirstID > after })-1, 0)
	j, n := i+1, 0
	for j < len(bs) && n < limit {
		n += bs[j].Lines
		j++
	}
	end := a.Size
	if j < len(bs) {
		end = bs[j].Offset
	}
	if bs[i].Offset < 0 || end <= bs[i].Offset || end > a.Size {
		return nil, fmt.Errorf("%w: %s: bad block offsets", ErrCorrupt, a.Key)
	}
	rc, err := r.Objects.OpenRange(ctx, a.Key, bs[i].Offset, end-bs[i].Offset)
	if err != nil {
		return nil, err
	}
	defer rc.Close()
	cr := &countingReader{r: rc}
	lines, err := decode(cr, a, bs[i:j])
	if err != nil {
		return nil, err
	}
	if cr.n != end-bs[i].Offset {
		return nil, fmt.Errorf("%w: %s: %d bytes where %d were recorded", ErrCorrupt, a.Key, cr.n, end-bs[i].Offset)
	}
	k := sort.Search(len(lines), func(k int) bool { return lines[k].ID > after })
	lines = lines[k:]
	if len(lines) > limit {
		lines = lines[:limit]
	}
	return lines, nil
}

// merge merges two ID-ordered lists, keeping one line of each ID.
func merge(a, b []*store.LogLine) []*store.LogLine {
	if len(a) == 0 {
		return b
	}
	if len(b) == 0 {
		return a
	}
	out := make([]*store.LogLine, 0, len(a)+len(b))
	for len(a) > 0 && len(b) > 0 {
		switch {
		case a[0].ID < b[0].ID:
			out, a = append(out, a[0]), a[1:]
		case a[0].ID > b[0].ID:
			out, b = append(out, b[0]), b[1:]
		default:
			out, a, b = append(out, a[0]), a[1:], b[1:]
		}
	}
	out = append(out, a...)
	return append(out, b...)
}

type countingReader struct {
	r io.Reader
	n int64
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += int64(n)
	return n, err
}
