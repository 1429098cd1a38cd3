package logarchive

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"path"

	"github.com/jobplane/jobplane/internal/artifact"
	"github.com/jobplane/jobplane/internal/store"
)

// keyDir is the first segment of every archive's key. It is not a valid
// tenant name, so no artifact key can ever be one.
const keyDir = ".logs"

// maxObject bounds one archive's object; the database holds far less.
const maxObject = 1 << 40

// Key is where the lines of an attempt of run of tenant go: the same key
// every time, so that a move interrupted after publishing finds its object
// again instead of leaving it behind.
func Key(tenant, runID, attemptID string) string {
	return path.Join(keyDir, tenant, runID, attemptID+".jsonl.gz")
}

// altKey is where the lines go when Key holds other bytes (an object
// written by a build that compresses differently): named by their digest.
func altKey(tenant, runID, attemptID, sum string) string {
	return path.Join(keyDir, tenant, runID, attemptID+"."+sum[:16]+".jsonl.gz")
}

// Source pages an attempt's lines in ID order: at most n with ID > after.
type Source func(ctx context.Context, after int64, n int) ([]*store.LogLine, error)

// pageLines is how many lines Write reads from its Source at a time.
const pageLines = 2000

// Write publishes the lines src yields as the archive of an attempt and
// returns its row (State LogArchiveMoving), or nil when src yields none.
// When the object already exists, as after a move interrupted between
// publishing and committing, it is used if it holds the same bytes.
func Write(ctx context.Context, objs artifact.Storage, tenant, runID, attemptID string, src Source) (*store.LogArchive, error) {
	a, err := write(ctx, objs, Key(tenant, runID, attemptID), src)
	if a == nil || err != nil {
		return nil, err
	}
	if !a.exists {
		return a.row(tenant, runID, attemptID), nil
	}
	same, err := sameBytes(ctx, objs, a.key, a.sum)
	if err != nil {
		return nil, err
	}
	if same {
		return a.row(tenant, runID, attemptID), nil
	}
	a, err = write(ctx, objs, altKey(tenant, runID, attemptID, a.sum), src)
	if a == nil || err != nil {
		// nil: the lines went while the key was compared (nothing to move).
		return nil, err
	}
	if a.exists {
		// An earlier interrupted move of this build; named by the digest,
		// it holds these bytes.
		a.exists = false
	}
	return a.row(tenant, runID, attemptID), nil
}

// written is the outcome of one write.
type written struct {
	key    string
	enc    *encoder
	size   int64
	sum    string
	exists bool // the key held an object already; ours was discarded
}

func (w *written) row(tenant, runID, attemptID string) *store.LogArchive {
	return &store.LogArchive{AttemptID: attemptID, RunID: runID, Tenant: tenant, Key: w.key,
		FirstID: w.enc.first, LastID: w.enc.last, Lines: w.enc.lines, Size: w.size, SHA256: w.sum,
		Blocks: w.enc.blocks, State: store.LogArchiveMoving}
}

var (
	// errNoLines ends a write whose source yields nothing.
	errNoLines = errors.New("no lines")
	// errStageEnded stops the encoder of a write whose Stage returned.
	errStageEnded = errors.New("stage ended")
)

func write(ctx context.Context, objs artifact.Storage, key string, src Source) (*written, error) {
	pr, pw := io.Pipe()
	enc := newEncoder(pw)
	done := make(chan error, 1)
	go func() {
		err := encodeAll(ctx, enc, src)
		pw.CloseWithError(err)
		done <- err
	}()
	st, err := objs.Stage(ctx, key, pr, maxObject)
	_ = pr.CloseWithError(errStageEnded) // unblocks the encoder if Stage stopped early
	encErr := <-done
	if errors.Is(encErr, errStageEnded) && err != nil {
		encErr = nil // the store's failure is the one to report
	}
	if encErr != nil {
		if st != nil {
			_ = st.Discard()
		}
		if errors.Is(encErr, errNoLines) {
			return nil, nil
		}
		return nil, fmt.Errorf("read lines for %s: %w", key, encErr)
	}
	if err != nil {
		return nil, fmt.Errorf("stage %s: %w", key, err)
	}
	w := &written{key: key, enc: enc, size: st.Size(), sum: st.SHA256()}
	switch err := st.Publish(ctx); {
	case errors.Is(err, artifact.ErrExists):
		_ = st.Discard()
		w.exists = true
	case err != nil:
		_ = st.Discard()
		return nil, fmt.Errorf("publish %s: %w", key, err)
	}
	return w, nil
}

func encodeAll(ctx context.Context, enc *encoder, src Source) error {
	after := int64(0)
	for {
		lines, err := src(ctx, after, pageLines)
		if err != nil {
			return err
		}
		for _, l := range lines {
			if err := enc.add(l); err != nil {
				return err
			}
			after = l.ID
		}
		if len(lines) < pageLines {
			break
		}
	}
	if enc.lines == 0 {
		return errNoLines
	}
	return enc.flush()
}

// sameBytes says whether the object under key has the SHA-256 sum.
func sameBytes(ctx context.Context, objs artifact.Storage, key, sum string) (bool, error) {
	rc, err := objs.Open(ctx, key)
	if err != nil {
		return false, fmt.Errorf("open %s: %w", key, err)
	}
	defer rc.Close()
	h := sha256.New()
	if _, err := io.Copy(h, rc); err != nil {
		return false, fmt.Errorf("read %s: %w", key, err)
	}
	return hex.EncodeToString(h.Sum(nil)) == sum, nil
}
