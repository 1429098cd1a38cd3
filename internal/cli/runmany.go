package cli

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"

	"github.com/jobplane/jobplane/internal/apiclient"
	"github.com/jobplane/jobplane/internal/protocol"
)

// paramLine is one run's parameters from a --params-file, with its line.
type paramLine struct {
	line   int
	params json.RawMessage
}

// readParamsFile reads a JSON Lines file of parameter objects, each merged
// over the -p values (common). The whole file is checked before anything is
// requested: an error names the file, the line and what is wrong.
func readParamsFile(path string, common json.RawMessage) ([]paramLine, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var base map[string]json.RawMessage
	if err := json.Unmarshal(common, &base); err != nil {
		return nil, err
	}
	var out []paramLine
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64*1024), 1<<20)
	for n := 1; sc.Scan(); n++ {
		b := bytes.TrimSpace(sc.Bytes())
		if len(b) == 0 || b[0] == '#' {
			continue
		}
		dec := json.NewDecoder(bytes.NewReader(b))
		var m map[string]json.RawMessage
		if err := dec.Decode(&m); err != nil || m == nil || dec.More() {
			if err == nil {
				err = errors.New("want one JSON object")
			}
			return nil, fmt.Errorf("%s:%d: %v", path, n, err)
		}
		for k, v := range base {
			if _, dup := m[k]; dup {
				return nil, fmt.Errorf("%s:%d: parameter %q is given both here and with -p", path, n, k)
			}
			m[k] = v
		}
		p, err := json.Marshal(m)
		if err != nil {
			return nil, fmt.Errorf("%s:%d: %v", path, n, err)
		}
		out = append(out, paramLine{line: n, params: p})
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("%s: %v", path, err)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("%s: no parameter lines", path)
	}
	return out, nil
}

// runBatchBytes bounds the requests of one call, below the server's body
// limit (protocol.MaxBodyBytes) with room for the envelope: a line's params
// may be up to 64 KiB, so 100 of them may not fit in one body.
const runBatchBytes = protocol.MaxBodyBytes - 4096

// batches cuts reqs into consecutive spans [start, end) of at most n
// requests whose JSON together stays within size bytes (a request larger
// than that alone is a span of its own, for the server to refuse).
func batches(reqs []protocol.RunRequest, n, size int) [][2]int {
	var out [][2]int
	start, used := 0, 0
	for i := range reqs {
		b, _ := json.Marshal(&reqs[i])
		if i > start && (i-start == n || used+len(b)+1 > size) {
			out = append(out, [2]int{start, i})
			start, used = i, 0
		}
		used += len(b) + 1
	}
	if start < len(reqs) {
		out = append(out, [2]int{start, len(reqs)})
	}
	return out
}

// runMany requests one run per line of --params-file in calls of up to
// protocol.MaxRunBatch (fewer when their bodies would be too large), printing each line's run or refusal as its call is
// answered and the progress on stderr. It exits 1 when any line was
// refused; with --idempotency-key the same command again requests only the
// lines that have no run yet.
func (c *RunCmd) runMany(g *Globals, cl *apiclient.Client, common json.RawMessage) error {
	if c.Wait {
		return errors.New("--wait follows one run: it cannot be used with --params-file")
	}
	lines, err := readParamsFile(c.ParamsFile, common)
	if err != nil {
		return err
	}
	all := make([]protocol.RunRequest, len(lines))
	for i, l := range lines {
		all[i] = protocol.RunRequest{Job: c.Job, Channel: c.Channel, Ref: c.Ref, Params: l.params, Reason: c.Reason}
		if c.IdempotencyKey != "" {
			all[i].IdempotencyKey = fmt.Sprintf("%s:%d", c.IdempotencyKey, l.line)
		}
	}
	// The text lines print a run's ID and state alone; --json prints
	// whole runs.
	create := cl.CreateRunsBrief
	if c.JSON {
		create = cl.CreateRuns
	}
	refused, done := 0, 0
	for _, span := range batches(all, protocol.MaxRunBatch, runBatchBytes) {
		chunk, reqs := lines[span[0]:span[1]], all[span[0]:span[1]]
		answers, err := create(g.Ctx, reqs)
		if err != nil {
			return fmt.Errorf("lines %d to %d of %s: %w (the %d runs before them were requested)", chunk[0].line, chunk[len(chunk)-1].line, c.ParamsFile, err, done)
		}
		for i, a := range answers {
			if err := c.printAnswer(g, chunk[i].line, a); err != nil {
				return err
			}
			if a.Err != nil {
				refused++
			}
		}
		done += len(chunk)
		fmt.Fprintf(g.Stderr, "%d of %d requested\n", done, len(lines))
	}
	if refused > 0 {
		fmt.Fprintf(g.Stderr, "%d of %d lines refused\n", refused, len(lines))
		return &ExitError{Code: 1}
	}
	return nil
}

func (c *RunCmd) printAnswer(g *Globals, line int, a apiclient.RunAnswer) error {
	if c.JSON {
		v := map[string]any{"line": line}
		if a.Err != nil {
			var ae *apiclient.APIError
			if errors.As(a.Err, &ae) {
				v["error"] = ae.Problem
			} else {
				v["error"] = a.Err.Error()
			}
		} else {
			v["run"], v["created"] = a.Run, a.Created
		}
		b, err := json.Marshal(v)
		if err != nil {
			return err
		}
		_, err = fmt.Fprintln(g.Stdout, string(b))
		return err
	}
	switch {
	case a.Err != nil:
		_, err := fmt.Fprintf(g.Stdout, "line %d: refused: %v\n", line, a.Err)
		return err
	case !a.Created:
		_, err := fmt.Fprintf(g.Stdout, "line %d: run %s %s (requested before, same idempotency key)\n", line, a.Run.ID, a.Run.State)
		return err
	default:
		_, err := fmt.Fprintf(g.Stdout, "line %d: run %s %s\n", line, a.Run.ID, a.Run.State)
		return err
	}
}
