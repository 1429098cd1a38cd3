package control

// The client processes of the L1 linearizability workload: copies of this
// test binary, each a control plane of its own over the shared store, whose
// clients record their operations for the parent to check with its own.

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/jobplane/jobplane/internal/principal"
	"github.com/jobplane/jobplane/internal/store"
	"github.com/jobplane/jobplane/internal/store/postgres"
	"github.com/jobplane/jobplane/internal/store/sqlite"
)

// lkRecord is one line of a client process's output: an operation, or the
// fencing token of an attempt it claimed (Attempt set).
type lkRecord struct {
	Client    int      `json:"c"`
	In        lkInput  `json:"in"`
	Out       lkOutput `json:"out"`
	Call, Ret int64
	Attempt   string `json:"a,omitempty"`
	Token     int64  `json:"t,omitempty"`
}

// fileClock reads the fake time the parent publishes (Unix ns, 8 bytes).
type fileClock struct{ f *os.File }

func (c fileClock) Now() time.Time {
	var b [8]byte
	if _, err := c.f.ReadAt(b[:], 0); err != nil {
		panic(fmt.Sprintf("read the published clock: %v", err))
	}
	return time.Unix(0, int64(binary.LittleEndian.Uint64(b[:]))).UTC()
}

func (c fileClock) NowOrNil() *time.Time {
	t := c.Now()
	return &t
}

type lkChild struct {
	cmd      *exec.Cmd
	out      string
	stderr   bytes.Buffer
	waitOnce sync.Once
	err      error
}

func startLKChild(t *testing.T, dsn, clockFile string, first, n, opsPer int, seed uint64) *lkChild {
	t.Helper()
	self, err := os.Executable()
	require.NoError(t, err)
	c := &lkChild{out: filepath.Join(t.TempDir(), "ops.jsonl")}
	c.cmd = exec.Command(self)
	c.cmd.Env = append(os.Environ(), "LK_CHILD=1", "LK_DSN="+dsn, "LK_CLOCK="+clockFile, "LK_OUT="+c.out,
		fmt.Sprintf("LK_FIRST=%d", first), fmt.Sprintf("LK_N=%d", n), fmt.Sprintf("LK_OPS=%d", opsPer), fmt.Sprintf("LK_SEED=%d", seed))
	c.cmd.Stderr = &c.stderr
	require.NoError(t, c.cmd.Start())
	t.Cleanup(func() {
		_ = c.cmd.Process.Kill()
		_ = c.wait()
	})
	return c
}

func (c *lkChild) wait() error {
	c.waitOnce.Do(func() {
		if err := c.cmd.Wait(); err != nil {
			c.err = fmt.Errorf("%v: %s", err, c.stderr.String())
		}
	})
	return c.err
}

func (c *lkChild) records() ([]lkRecord, error) {
	f, err := os.Open(c.out)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var out []lkRecord
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		var r lkRecord
		if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
			return nil, err
		}
		out = append(out, r)
	}
	return out, sc.Err()
}

// lkChildMain is a client process (LK_CHILD=1): it opens the store, makes
// its runners and control plane, runs its clients and writes their records.
func lkChildMain() int {
	if err := lkChild1(); err != nil {
		fmt.Fprintln(os.Stderr, "lk child:", err)
		return 1
	}
	return 0
}

func lkChild1() error {
	ctx := context.Background()
	atoi := func(k string) int {
		n, _ := strconv.Atoi(os.Getenv(k))
		return n
	}
	first, n, opsPer := atoi("LK_FIRST"), atoi("LK_N"), atoi("LK_OPS")
	seed, _ := strconv.ParseUint(os.Getenv("LK_SEED"), 10, 64)
	var st store.Store
	var err error
	if dsn := os.Getenv("LK_DSN"); strings.HasPrefix(dsn, "sqlite:") {
		st, err = sqlite.Open(ctx, strings.TrimPrefix(dsn, "sqlite:"))
	} else {
		st, err = postgres.Open(ctx, dsn)
	}
	if err != nil {
		return err
	}
	defer st.Close()
	cf, err := os.Open(os.Getenv("LK_CLOCK"))
	if err != nil {
		return err
	}
	defer cf.Close()
	clk := fileClock{cf}
	defs := &multiDefs{jobs: map[string]Spec{}}
	for _, j := range lkJobs() {
		defs.jobs[j.Name] = j
	}
	svc, err := New(Config{Store: st, Clock: clk, Definitions: defs, ReapBatch: 100000})
	if err != nil {
		return err
	}
	rec := &recorder{}
	var mu sync.Mutex
	var claims []lkRecord
	actor := principal.Actor{TenantID: testTenant, Name: "alice", Kind: "user", Admin: true}
	var wg sync.WaitGroup
	var firstErr error
	var errMu sync.Mutex
	failed := func() bool { errMu.Lock(); defer errMu.Unlock(); return firstErr != nil }
	for i := first; i < first+n; i++ {
		k := lkKeys[i%len(lkKeys)]
		rn, err := newRunner(ctx, st, clk.Now(), k.pool, fmt.Sprintf("lk-proc-%d", i))
		if err != nil {
			return err
		}
		c := &lkClient{id: i, k: k, rn: rn, sv: svc, actor: actor, rec: rec, claimed: func(a string, tok int64) {
			mu.Lock()
			claims = append(claims, lkRecord{Attempt: a, Token: tok})
			mu.Unlock()
		}}
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := c.run(ctx, opsPer, seed, failed); err != nil {
				errMu.Lock()
				firstErr = errors.Join(firstErr, fmt.Errorf("client %d: %w", c.id, err))
				errMu.Unlock()
			}
		}()
	}
	wg.Wait()
	if firstErr != nil {
		return firstErr
	}
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	for _, c := range claims {
		_ = enc.Encode(c)
	}
	for _, op := range rec.ops {
		_ = enc.Encode(lkRecord{Client: op.ClientId, In: op.Input.(lkInput), Out: op.Output.(lkOutput), Call: op.Call, Ret: op.Return})
	}
	return os.WriteFile(os.Getenv("LK_OUT"), b.Bytes(), 0o644)
}
