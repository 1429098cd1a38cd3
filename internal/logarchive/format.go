package logarchive

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/jobplane/jobplane/internal/artifact"
	"github.com/jobplane/jobplane/internal/store"
)

// Block bounds: a member is cut after BlockLines lines or once it holds
// BlockBytes bytes uncompressed, whichever comes first. A page of the logs
// API (at most 5,000 lines) then reads a few members.
const (
	BlockLines = 1000
	BlockBytes = 1 << 20
)

// blockLines is BlockLines, smaller in tests.
var blockLines = BlockLines

// ErrCorrupt: an archived object does not hold what its row says.
var ErrCorrupt = errors.New("log archive corrupt")

// record is one line as an object holds it.
type record struct {
	ID     int64  `json:"i"`
	Seq    int64  `json:"q"`
	Idx    int    `json:"x"`
	At     int64  `json:"a"` // Unix microseconds
	Stream string `json:"s"`
	Text   string `json:"t"`
}

// encoder writes lines as gzip members to w, recording each member.
type encoder struct {
	w      *countingWriter
	gz     *gzip.Writer
	buf    bytes.Buffer
	blocks []store.LogBlock
	cur    store.LogBlock
	first  int64
	last   int64
	lines  int64
}

func newEncoder(w io.Writer) *encoder {
	return &encoder{w: &countingWriter{w: w}}
}

func (e *encoder) add(l *store.LogLine) error {
	if e.lines > 0 && l.ID <= e.last {
		return fmt.Errorf("log line %d after %d: lines must come in ID order", l.ID, e.last)
	}
	if e.cur.Lines == 0 {
		e.cur.FirstID = l.ID
	}
	b, err := json.Marshal(record{ID: l.ID, Seq: l.Seq, Idx: l.Idx, At: l.At.UnixMicro(), Stream: l.Stream, Text: l.Text})
	if err != nil {
		return err
	}
	e.buf.Write(b)
	e.buf.WriteByte('\n')
	e.cur.Lines++
	if e.lines == 0 {
		e.first = l.ID
	}
	e.last = l.ID
	e.lines++
	if e.cur.Lines >= blockLines || e.buf.Len() >= BlockBytes {
		return e.flush()
	}
	return nil
}

// flush writes the current member.
func (e *encoder) flush() error {
	if e.cur.Lines == 0 {
		return nil
	}
	e.cur.Offset = e.w.n
	e.cur.Raw = int64(e.buf.Len())
	if e.gz == nil {
		e.gz = gzip.NewWriter(e.w)
	} else {
		e.gz.Reset(e.w)
	}
	if _, err := e.gz.Write(e.buf.Bytes()); err != nil {
		return err
	}
	if err := e.gz.Close(); err != nil {
		return err
	}
	e.blocks = append(e.blocks, e.cur)
	e.cur = store.LogBlock{}
	e.buf.Reset()
	return nil
}

type countingWriter struct {
	w io.Writer
	n int64
}

func (c *countingWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.n += int64(n)
	return n, err
}

// decode reads the members blocks (consecutive in an object) from r and
// returns their lines of attempt of run a, checking them against the
// row: every ID in the archive's range, increasing, and as many lines
// and bytes as recorded, no more (a hostile or damaged object cannot make
// the server decompress without bound).
func decode(r io.Reader, a *store.LogArchive, blocks []store.LogBlock) ([]*store.LogLine, error) {
	var raw int64
	want := 0
	for _, b := range blocks {
		raw += b.Raw
		want += b.Lines
	}
	gz, err := gzip.NewReader(r)
	if err != nil {
		return nil, readError(a.Key, err)
	}
	defer gz.Close()
	// One byte more than recorded tells "exactly" from "too much".
	lr := io.LimitReader(gz, raw+1)
	br := bufio.NewReaderSize(lr, 64<<10)
	out := make([]*store.LogLine, 0, want)
	var read int64
	last := a.FirstID - 1
	for {
		line, err := br.ReadSlice('\n')
		if errors.Is(err, bufio.ErrBufferFull) {
			var more []byte
			more, err = readRest(br, line)
			line = more
		}
		read += int64(len(line))
		if read > raw {
			return nil, fmt.Errorf("%w: %s holds more than %d bytes", ErrCorrupt, a.Key, raw)
		}
		if len(line) > 0 {
			if line[len(line)-1] != '\n' {
				return nil, fmt.Errorf("%w: %s: a line without its end", ErrCorrupt, a.Key)
			}
			var rec record
			if jerr := json.Unmarshal(line, &rec); jerr != nil {
				return nil, fmt.Errorf("%w: %s: %v", ErrCorrupt, a.Key, jerr)
			}
			if (len(out) == 0 && rec.ID != blocks[0].FirstID) || rec.ID <= last || rec.ID > a.LastID {
				return nil, fmt.Errorf("%w: %s: line %d out of order or range", ErrCorrupt, a.Key, rec.ID)
			}
			last = rec.ID
			out = append(out, &store.LogLine{ID: rec.ID, RunID: a.RunID, AttemptID: a.AttemptID, Seq: rec.Seq, Idx: rec.Idx,
				At: time.UnixMicro(rec.At).UTC(), Stream: rec.Stream, Text: rec.Text})
			if len(out) > want {
				return nil, fmt.Errorf("%w: %s: more than %d lines", ErrCorrupt, a.Key, want)
			}
		}
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, readError(a.Key, err)
		}
	}
	if len(out) != want || read != raw {
		return nil, fmt.Errorf("%w: %s: %d lines, %d bytes where %d, %d were recorded", ErrCorrupt, a.Key, len(out), read, want, raw)
	}
	return out, nil
}

// readRest completes a line longer than br's buffer.
func readRest(br *bufio.Reader, head []byte) ([]byte, error) {
	line := append([]byte(nil), head...)
	for {
		more, err := br.ReadSlice('\n')
		line = append(line, more...)
		if !errors.Is(err, bufio.ErrBufferFull) {
			return line, err
		}
	}
}

// readError tells the object store failing (artifact.ErrUnavailable)
// from bytes that are not what was written.
func readError(key string, err error) error {
	if errors.Is(err, artifact.ErrUnavailable) || errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return fmt.Errorf("read %s: %w", key, err)
	}
	return fmt.Errorf("%w: %s: %v", ErrCorrupt, key, err)
}
