package worker

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/jobplane/jobplane/internal/apiclient"
	"github.com/jobplane/jobplane/internal/protocol"
)

const (
	keyFile      = "runner.key"
	identityFile = "runner.json"
)

// identity is what runner.json records.
type identity struct {
	RunnerID string `json:"runner_id"`
	Server   string `json:"server"`
}

// loadOrCreateKey reads the runner key, making one on first start. The key
// is written before registering, so a crash in between re-registers the same
// public key rather than orphaning a registered one.
func loadOrCreateKey(dir string) (ed25519.PrivateKey, error) {
	path := filepath.Join(dir, keyFile)
	b, err := os.ReadFile(path)
	if err == nil {
		seed, err := base64.RawURLEncoding.DecodeString(strings.TrimSpace(string(b)))
		if err != nil || len(seed) != ed25519.SeedSize {
			return nil, fmt.Errorf("read %s: not a base64url ed25519 seed", path)
		}
		return ed25519.NewKeyFromSeed(seed), nil
	}
	if !errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("read runner key: %w", err)
	}
	seed := make([]byte, ed25519.SeedSize)
	if _, err := rand.Read(seed); err != nil {
		return nil, fmt.Errorf("make runner key: %w", err)
	}
	if err := writeFileAtomic(path, []byte(base64.RawURLEncoding.EncodeToString(seed)+"\n")); err != nil {
		return nil, fmt.Errorf("write runner key: %w", err)
	}
	return ed25519.NewKeyFromSeed(seed), nil
}

func loadIdentity(dir string) (*identity, error) {
	b, err := os.ReadFile(filepath.Join(dir, identityFile))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read runner identity: %w", err)
	}
	var id identity
	if err := json.Unmarshal(b, &id); err != nil || id.RunnerID == "" {
		return nil, fmt.Errorf("read runner identity: %s is malformed", identityFile)
	}
	return &id, nil
}

// writeFileAtomic writes via a 0600 temp file and a rename, so a crash never
// leaves a half-written identity behind.
func writeFileAtomic(path string, data []byte) error {
	f, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".tmp")
	if err != nil {
		return err
	}
	defer os.Remove(f.Name())
	if _, err := f.Write(data); err != nil {
		f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	return os.Rename(f.Name(), path)
}

// ensureIdentity loads the runner's identity, registering once when there is
// none. Transient failures are retried; a refused registration is returned.
func (w *Worker) ensureIdentity(ctx context.Context) error {
	if err := os.MkdirAll(w.cfg.StateDir, 0o700); err != nil {
		return fmt.Errorf("make state dir: %w", err)
	}
	// Only the worker may list or read it, whatever mode it was made with
	// (an executor with a job user may add passage, never reading).
	if err := os.Chmod(w.cfg.StateDir, 0o700); err != nil {
		return fmt.Errorf("restrict state dir: %w", err)
	}
	key, err := loadOrCreateKey(w.cfg.StateDir)
	if err != nil {
		return err
	}
	w.rc.Key = key
	id, err := loadIdentity(w.cfg.StateDir)
	if err != nil {
		return err
	}
	if id != nil {
		if !slices.Contains(w.cfg.serverURLs(), id.Server) {
			w.log.Warn("worker: identity was registered with another server URL", "recorded", id.Server, "servers", w.cfg.serverURLs())
		}
		w.rc.RunnerID = id.RunnerID
		w.log.Info("worker: using existing identity", "runner_id", id.RunnerID)
		return nil
	}
	if w.cfg.RegistrationToken == "" {
		return errNoRegistrationToken
	}
	req := protocol.RegisterRequest{
		Name:      w.cfg.Name,
		PublicKey: protocol.EncodeKey(key.Public().(ed25519.PublicKey)),
		Labels:    append([]string{}, w.cfg.Labels...),
		Version:   w.cfg.Version,
	}
	req.Executor, req.Capabilities = w.executorState()
	var resp *protocol.RegisterResponse
	for n := 0; ; n++ {
		resp, err = w.rc.Register(ctx, w.cfg.RegistrationToken, req)
		if err == nil {
			break
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if !apiclient.Retryable(err) {
			return fmt.Errorf("register runner: %w", err)
		}
		w.log.Warn("worker: register failed, retrying", "error", err)
		if !w.sleep(ctx, w.backoff(n)) {
			return ctx.Err()
		}
	}
	b, _ := json.MarshalIndent(identity{RunnerID: resp.RunnerID, Server: w.rc.Current().URL}, "", "  ")
	if err := writeFileAtomic(filepath.Join(w.cfg.StateDir, identityFile), append(b, '\n')); err != nil {
		return fmt.Errorf("write runner identity: %w", err)
	}
	w.rc.RunnerID = resp.RunnerID
	w.log.Info("worker: registered", "runner_id", resp.RunnerID, "pool", resp.Pool, "tenant", resp.Tenant)
	return nil
}
