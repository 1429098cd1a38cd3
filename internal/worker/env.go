package worker

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"sort"

	"github.com/jobplane/jobplane/internal/protocol"
)

// inheritedEnv is all a job gets of the worker's own environment: enough to
// find programs and behave sanely, nothing that could carry the worker's
// secrets.
var inheritedEnv = []string{"PATH", "HOME", "LANG", "TMPDIR"}

// jobEnv builds the job's environment. The protocol's variables come last
// and win, so job.env cannot forge a run ID or a fencing token. Parameters
// reach the process only as variables and a file, never through a shell
// template.
func jobEnv(getenv func(string) string, api string, a *protocol.Assignment, paramsFile, artifactsDir string) ([]string, error) {
	env := map[string]string{}
	for _, k := range inheritedEnv {
		if v := getenv(k); v != "" {
			env[k] = v
		}
	}
	if _, ok := env["PATH"]; !ok {
		env["PATH"] = "/usr/local/bin:/usr/bin:/bin"
	}
	for k, v := range a.Job.Env {
		env[k] = v
	}
	params, err := paramVars(a.Params)
	if err != nil {
		return nil, err
	}
	for k, v := range params {
		env[k] = v
	}
	fencing := map[string]int64{}
	for _, l := range a.Leases {
		fencing[l.Key] = l.FencingToken
	}
	ft, _ := json.Marshal(fencing)
	env[protocol.EnvAPI] = api
	env[protocol.EnvRunID] = a.RunID
	env[protocol.EnvAttemptID] = a.AttemptID
	env[protocol.EnvJob] = a.Job.Name
	env[protocol.EnvChannel] = a.Job.Channel
	env[protocol.EnvCommit] = a.Job.Commit
	delete(env, protocol.EnvRunToken)
	if a.RunToken != nil && a.RunToken.Token != "" {
		env[protocol.EnvRunToken] = a.RunToken.Token
	}
	env[protocol.EnvParamsFile] = paramsFile
	env[protocol.EnvFencingTokens] = string(ft)
	env[protocol.EnvArtifactsDir] = artifactsDir
	out := make([]string, 0, len(env))
	for k, v := range env {
		out = append(out, k+"="+v)
	}
	sort.Strings(out)
	return out, nil
}

// paramsObject returns the params as a JSON object, "{}" when absent.
func paramsObject(raw json.RawMessage) ([]byte, map[string]json.RawMessage, error) {
	if len(bytes.TrimSpace(raw)) == 0 || bytes.Equal(bytes.TrimSpace(raw), []byte("null")) {
		return []byte("{}"), map[string]json.RawMessage{}, nil
	}
	var m map[string]json.RawMessage
	if err := json.Unmarshal(raw, &m); err != nil {
		return nil, nil, fmt.Errorf("params are not a JSON object: %w", err)
	}
	return raw, m, nil
}

// paramVars maps each parameter to JOBPLANE_PARAM_<NAME>: strings as they
// are, other values as compact JSON. Two names that map to one variable are
// refused rather than letting one silently win.
func paramVars(raw json.RawMessage) (map[string]string, error) {
	_, m, err := paramsObject(raw)
	if err != nil {
		return nil, err
	}
	out := map[string]string{}
	owner := map[string]string{}
	for name, v := range m {
		k := protocol.ParamEnvName(name)
		if prev, ok := owner[k]; ok {
			return nil, fmt.Errorf("parameters %q and %q both map to %s", prev, name, k)
		}
		owner[k] = name
		// Only a JSON string is passed bare; null decodes into a string
		// too, so look at the value's kind first.
		if t := bytes.TrimSpace(v); len(t) > 0 && t[0] == '"' {
			var s string
			if err := json.Unmarshal(t, &s); err != nil {
				return nil, fmt.Errorf("parameter %q: %w", name, err)
			}
			out[k] = s
			continue
		}
		var buf bytes.Buffer
		if err := json.Compact(&buf, v); err != nil {
			return nil, fmt.Errorf("parameter %q: %w", name, err)
		}
		out[k] = buf.String()
	}
	return out, nil
}

// writeParamsFile writes the params object for JOBPLANE_PARAMS_FILE.
func writeParamsFile(path string, raw json.RawMessage) error {
	obj, _, err := paramsObject(raw)
	if err != nil {
		return err
	}
	return os.WriteFile(path, obj, 0o600)
}
