package supervise

import (
	"bufio"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
)

// Argv0 is the argv[0] under which a binary that links this package runs
// as a supervisor (see init).
const Argv0 = "jobplane-supervise"

// The supervisor's own exit codes when there is no job code to pass on.
const (
	codeStartFailed = 127
	codeUsage       = 126
)

// Reasons in the exit status line.
const (
	ReasonLeaseBound = "lease_bound"
	ReasonWorkerGone = "worker_gone"
	ReasonStopped    = "stopped"
	// ReasonLeaseEnded: the server answered that the attempt no longer
	// holds its lease (-lease-poll).
	ReasonLeaseEnded = "lease_ended"
)

// Status is one status line.
type Status struct {
	Event   string `json:"event"` // "started", "start_failed" or "exit"
	PID     int    `json:"pid,omitempty"`
	Error   string `json:"error,omitempty"`
	Code    int    `json:"code,omitempty"`
	Summary string `json:"summary,omitempty"`
	Reason  string `json:"reason,omitempty"`
}

// Options are the supervisor's flags as an executor sets them.
type Options struct {
	ControlFD int    // -1: none
	StatusFD  int    // -1: none
	UntilMS   int64  // -1: no bound
	Dir       string // the job's working directory
	User      string // "UID:GID" or empty
	EnvFile   string // empty: the supervisor's environment
	// LeasePoll: learn the lease from GET /v1/run/lease with the job's run
	// token (see the package documentation).
	LeasePoll bool
	// LeasePollMS is the interval between polls; 0 derives it from the
	// lease's TTL.
	LeasePollMS int64
	// Install: copy the running binary to this path and exit (no job).
	Install string
	// Setup: read the job's environment and first bound from the control
	// stream before starting it (see readSetup).
	Setup bool
	// Workspace and ArtifactsDir are created before the job starts (a
	// pod's emptyDir holds neither).
	Workspace    string
	ArtifactsDir string
	// SourceCommit: fetch the attempt's source with the job's run token
	// (POST /v1/run/source) into Workspace before the job starts; the
	// archive must be of this commit.
	SourceCommit string
	// Artifacts is a JSON array of the declared artifacts
	// ({"name","role","max_bytes"}): those the job leaves in ArtifactsDir
	// are uploaded with the run token (POST /v1/run/artifacts) once it
	// ended of itself.
	Artifacts string
	// Report is where the stored artifacts' IDs are written (a Report) once
	// the job has ended.
	Report string
	// ParamsFile: write the value of EnvParams, taken out of the job's
	// environment, to this file before the job starts.
	ParamsFile string
}

// EnvParams carries the job's parameters file (JOBPLANE_PARAMS_FILE) to a
// supervisor with -params-file; the job does not see the variable.
const EnvParams = "JOBPLANE_SUPERVISE_PARAMS"

// Args returns the supervisor's arguments (after argv[0] or after
// `jobplane supervise`) that run command with o.
func Args(o Options, command []string) []string {
	a := []string{
		"-control-fd=" + strconv.Itoa(o.ControlFD),
		"-status-fd=" + strconv.Itoa(o.StatusFD),
		"-until-ms=" + strconv.FormatInt(o.UntilMS, 10),
	}
	if o.Dir != "" {
		a = append(a, "-dir="+o.Dir)
	}
	if o.User != "" {
		a = append(a, "-user="+o.User)
	}
	if o.EnvFile != "" {
		a = append(a, "-env-file="+o.EnvFile)
	}
	if o.LeasePoll {
		a = append(a, "-lease-poll")
	}
	if o.LeasePollMS > 0 {
		a = append(a, "-lease-poll-ms="+strconv.FormatInt(o.LeasePollMS, 10))
	}
	if o.Setup {
		a = append(a, "-setup")
	}
	for _, f := range []struct{ name, v string }{{"workspace", o.Workspace}, {"artifacts-dir", o.ArtifactsDir},
		{"source-commit", o.SourceCommit}, {"artifacts", o.Artifacts}, {"report", o.Report}, {"params-file", o.ParamsFile}} {
		if f.v != "" {
			a = append(a, "-"+f.name+"="+f.v)
		}
	}
	return append(append(a, "--"), command...)
}

func init() {
	// A binary re-executed as a supervisor does nothing else: the job's
	// bound must not depend on the rest of the program starting.
	if len(os.Args) > 0 && os.Args[0] == Argv0 {
		os.Exit(Main(os.Args[1:], os.Stderr))
	}
}

// parse reads the flags; usage errors go to stderr.
func parse(args []string, stderr io.Writer) (Options, []string, error) {
	fs := flag.NewFlagSet("jobplane supervise", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var o Options
	fs.IntVar(&o.ControlFD, "control-fd", -1, "read control lines from this file descriptor (-1: none)")
	fs.IntVar(&o.StatusFD, "status-fd", -1, "write status lines to this file descriptor (-1: none)")
	fs.Int64Var(&o.UntilMS, "until-ms", -1, "the job must be gone this many milliseconds from now (-1: no bound)")
	fs.StringVar(&o.Dir, "dir", "", "the job's working directory")
	fs.StringVar(&o.User, "user", "", "run the job as UID:GID")
	fs.StringVar(&o.EnvFile, "env-file", "", "the job's environment, NUL-separated; read and removed")
	fs.BoolVar(&o.LeasePoll, "lease-poll", false, "learn the lease from GET /v1/run/lease with the job's run token")
	fs.Int64Var(&o.LeasePollMS, "lease-poll-ms", 0, "milliseconds between lease polls (0: from the lease's TTL)")
	fs.StringVar(&o.Install, "install", "", "copy this binary to PATH and exit")
	fs.BoolVar(&o.Setup, "setup", false, "read the job's environment and first bound from the control stream before starting it")
	fs.StringVar(&o.Workspace, "workspace", "", "create this workspace directory (and fetch the source into it, -source-commit)")
	fs.StringVar(&o.ArtifactsDir, "artifacts-dir", "", "create this directory; the job leaves its artifacts there")
	fs.StringVar(&o.SourceCommit, "source-commit", "", "fetch the attempt's source with the run token into -workspace; it must be this commit")
	fs.StringVar(&o.Artifacts, "artifacts", "", `the declared artifacts, a JSON array of {"name","role","max_bytes"}, uploaded from -artifacts-dir with the run token`)
	fs.StringVar(&o.Report, "report", "", "write the stored artifacts' IDs here (JSON) once the job has ended")
	fs.StringVar(&o.ParamsFile, "params-file", "", "write $"+EnvParams+" to this file (the variable is not passed to the job)")
	if err := fs.Parse(args); err != nil {
		return o, nil, err
	}
	if o.Install != "" {
		return o, nil, nil
	}
	if fs.NArg() == 0 {
		return o, nil, errors.New("jobplane supervise: no command (usage: jobplane supervise [flags] -- COMMAND [ARG...])")
	}
	if o.ControlFD >= 0 && o.ControlFD <= 2 && o.ControlFD != 0 {
		return o, nil, fmt.Errorf("jobplane supervise: -control-fd %d is stdout or stderr", o.ControlFD)
	}
	if o.Setup && o.ControlFD < 0 {
		return o, nil, errors.New("jobplane supervise: -setup needs -control-fd")
	}
	if o.SourceCommit != "" && o.Workspace == "" {
		return o, nil, errors.New("jobplane supervise: -source-commit needs -workspace")
	}
	if o.Artifacts != "" && o.ArtifactsDir == "" {
		return o, nil, errors.New("jobplane supervise: -artifacts needs -artifacts-dir")
	}
	if _, err := ParseArtifacts(o.Artifacts); err != nil {
		return o, nil, fmt.Errorf("jobplane supervise: %w", err)
	}
	if o.StatusFD == 0 || o.StatusFD == 2 {
		return o, nil, fmt.Errorf("jobplane supervise: -status-fd %d is stdin or stderr", o.StatusFD)
	}
	return o, fs.Args(), nil
}

// readEnvFile reads and removes a NUL-separated environment file.
func readEnvFile(path string) ([]string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	if err := os.Remove(path); err != nil {
		return nil, err
	}
	var env []string
	for _, kv := range strings.Split(string(b), "\x00") {
		if kv == "" {
			continue
		}
		if strings.Index(kv, "=") < 1 {
			return nil, fmt.Errorf("env file %s: an entry is not NAME=VALUE", path)
		}
		env = append(env, kv)
	}
	return env, nil
}

// maxSetupLine bounds one setup line (the environment line is the long one).
const maxSetupLine = 1 << 20

// readSetup reads the setup lines that start a supervisor run with -setup:
// at most one `env ["NAME=VALUE",...]` (a JSON array, so that values may hold
// any byte) and then `until MS`, the first bound, which starts the job.
// env is nil when no env line came. A container's supervisor learns its
// bound this way, measured from when the worker sends it rather than from
// when the container was created, and its environment without it being
// written anywhere (the engine's record of the container, a file).
func readSetup(r *bufio.Reader) (env []string, untilMS int64, err error) {
	for {
		line, err := readLimitedLine(r, maxSetupLine)
		if err != nil {
			return nil, 0, fmt.Errorf("the control stream ended before the job's setup: %w", err)
		}
		verb, arg, _ := strings.Cut(line, " ")
		switch verb {
		case "env":
			if env != nil {
				return nil, 0, errors.New("setup: a second env line")
			}
			var e []string
			if err := json.Unmarshal([]byte(arg), &e); err != nil {
				return nil, 0, fmt.Errorf("setup: env: %w", err)
			}
			env = make([]string, 0, len(e))
			for _, kv := range e {
				if strings.Index(kv, "=") < 1 || strings.ContainsRune(kv, 0) {
					return nil, 0, errors.New("setup: env: an entry is not NAME=VALUE")
				}
				env = append(env, kv)
			}
		case "until":
			ms, err := strconv.ParseInt(arg, 10, 64)
			if err != nil || ms < 0 {
				return nil, 0, fmt.Errorf("setup: until %q is not a count of milliseconds", arg)
			}
			return env, ms, nil
		default:
			return nil, 0, fmt.Errorf("setup: unexpected line %.40q", line)
		}
	}
}

// readLimitedLine reads one line of at most limit bytes, without its end.
func readLimitedLine(r *bufio.Reader, limit int) (string, error) {
	var b []byte
	for {
		frag, err := r.ReadSlice('\n')
		b = append(b, frag...)
		if len(b) > limit {
			return "", errors.New("line too long")
		}
		switch {
		case err == nil:
			return strings.TrimSuffix(string(b[:len(b)-1]), "\r"), nil
		case errors.Is(err, bufio.ErrBufferFull):
			continue
		default:
			return "", err
		}
	}
}

// control is one parsed control line.
type control struct {
	verb string // "until", "stop", or "" for end of stream
	ms   int64
}

// readControl sends each control line of r to out, then a zero control
// when r ends. Malformed lines are ignored: the worker is the only writer.
func readControl(r io.Reader, out chan<- control) {
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) != 2 || (f[0] != "until" && f[0] != "stop") {
			continue
		}
		ms, err := strconv.ParseInt(f[1], 10, 64)
		if err != nil || ms < 0 {
			continue
		}
		out <- control{verb: f[0], ms: ms}
	}
	out <- control{}
}

// statusWriter writes status lines; a nil one writes nothing.
type statusWriter struct{ f *os.File }

func (w statusWriter) write(s Status) {
	if w.f == nil {
		return
	}
	b, _ := json.Marshal(s)
	_, _ = w.f.Write(append(b, '\n'))
}

// ReadStatus parses one status line.
func ReadStatus(line []byte) (Status, error) {
	var s Status
	err := json.Unmarshal(line, &s)
	return s, err
}

// takeParams removes EnvParams from env and returns its value.
func takeParams(env []string) ([]string, string, bool) {
	out := env[:0:0]
	val, found := "", false
	for _, kv := range env {
		if v, ok := strings.CutPrefix(kv, EnvParams+"="); ok {
			val, found = v, true
			continue
		}
		out = append(out, kv)
	}
	return out, val, found
}
