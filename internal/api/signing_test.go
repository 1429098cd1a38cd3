package api_test

import (
	"crypto/ed25519"
	"crypto/rand"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/jobplane/jobplane/internal/authn"
	"github.com/jobplane/jobplane/internal/protocol"
	"github.com/jobplane/jobplane/internal/store"
	"github.com/jobplane/jobplane/internal/store/testdb"
)

// TestSignedRequests covers acceptance cases S1–S6 and S8 and every runner
// error code of the protocol with real signed HTTP requests.
func TestSignedRequests(t *testing.T) {
	t.Parallel()
	testdb.Each(t, func(t *testing.T, st store.Store) {
		e := newEnv(t, st)
		rc := e.runner()
		key := rc.Key
		e.request("echo", "")
		_, ref := e.claim(rc)
		renew := func() rawSigned {
			return rawSigned{Path: "/v1/runner/attempt/renew", Body: []byte(`{}`), Runner: rc.RunnerID, Key: key,
				Run: ref.RunID, Attempt: ref.AttemptID, Lease: ref.LeaseToken}
		}

		t.Run("golden request is accepted", func(t *testing.T) {
			code, pc := e.send(e.signedRequest(renew()))
			require.Equal(t, 200, code, pc)
		})

		t.Run("S3 every covered field tampered", func(t *testing.T) {
			// Each mutation changes one thing after signing; all must be 401.
			mutations := map[string]func(r *http.Request){
				"method": func(r *http.Request) { r.Method = http.MethodPut },
				"path":   func(r *http.Request) { r.URL.Path = "/v1/runner/heartbeat" },
				"query":  func(r *http.Request) { r.URL.RawQuery = "x=1" },
				"timestamp": func(r *http.Request) {
					r.Header.Set(protocol.HeaderTimestamp, strconv.FormatInt(e.clock.Now().Unix()-1, 10))
				},
				"nonce":     func(r *http.Request) { r.Header.Set(protocol.HeaderNonce, "BBBBBBBBBBBBBBBBBBBBBBBB") },
				"runner":    func(r *http.Request) { r.Header.Set(protocol.HeaderRunner, "rnr_other") },
				"run":       func(r *http.Request) { r.Header.Set(protocol.HeaderRun, "run_other") },
				"attempt":   func(r *http.Request) { r.Header.Set(protocol.HeaderAttempt, "att_other") },
				"lease":     func(r *http.Request) { r.Header.Set(protocol.HeaderLease, "other-lease") },
				"body byte": func(r *http.Request) { setBody(r, []byte(`{ }`)) },
				"appended":  func(r *http.Request) { setBody(r, []byte(`{}x`)) },
				"truncated": func(r *http.Request) { setBody(r, []byte(`{`)) },
				"signature": func(r *http.Request) {
					r.Header.Set(protocol.HeaderSignature, flip(r.Header.Get(protocol.HeaderSignature)))
				},
				"no sig": func(r *http.Request) { r.Header.Del(protocol.HeaderSignature) },
			}
			// A canonical field without a mutation case fails this test.
			for _, f := range []string{"method", "path", "query", "timestamp", "nonce", "runner", "run", "attempt", "lease", "body byte"} {
				require.Contains(t, mutations, f)
			}
			for name, mut := range mutations {
				req := e.signedRequest(renew())
				mut(req)
				code, pc := e.send(req)
				if name == "method" {
					// PUT has no route: refused before any handler runs.
					require.Contains(t, []int{401, 405}, code, name)
					continue
				}
				require.Equal(t, 401, code, "%s: %s", name, pc)
				require.Equal(t, protocol.CodeSignatureInvalid, pc, name)
			}
		})

		t.Run("every signed route requires a signature", func(t *testing.T) {
			for _, p := range []string{"/v1/runner/heartbeat", "/v1/runner/claim", "/v1/runner/attempt/renew", "/v1/runner/attempt/logs",
				"/v1/runner/attempt/relinquish", "/v1/runner/attempt/result", "/v1/runner/keys"} {
				req, _ := http.NewRequest(http.MethodPost, e.srv.URL+p, strings.NewReader(`{}`))
				code, pc := e.send(req)
				require.Equal(t, 401, code, p)
				require.Equal(t, protocol.CodeSignatureInvalid, pc, p)
			}
		})

		t.Run("S1 replay is refused, and of 50 copies exactly one wins", func(t *testing.T) {
			r := renew()
			r.Nonce = "replay-nonce-0123456789abcdef"
			code, _ := e.send(e.signedRequest(r))
			require.Equal(t, 200, code)
			code, pc := e.send(e.signedRequest(r))
			require.Equal(t, 401, code)
			require.Equal(t, protocol.CodeNonceReused, pc)

			r.Nonce = "concurrent-nonce-0123456789abc"
			var wg sync.WaitGroup
			var mu sync.Mutex
			got := map[int]int{}
			for range 50 {
				req := e.signedRequest(r)
				wg.Add(1)
				go func() {
					defer wg.Done()
					code, _ := e.send(req)
					mu.Lock()
					got[code]++
					mu.Unlock()
				}()
			}
			wg.Wait()
			require.Equal(t, map[int]int{200: 1, 401: 49}, got)
		})

		t.Run("S2 timestamp boundaries", func(t *testing.T) {
			now := e.clock.Now().Unix()
			for _, tc := range []struct {
				offset int64
				ok     bool
			}{{-60, true}, {60, true}, {-61, false}, {61, false}} {
				r := renew()
				r.Timestamp = strconv.FormatInt(now+tc.offset, 10)
				code, pc := e.send(e.signedRequest(r))
				if tc.ok {
					require.Equal(t, 200, code, "offset %d: %s", tc.offset, pc)
				} else {
					require.Equal(t, 401, code, "offset %d", tc.offset)
					require.Equal(t, protocol.CodeTimestampSkew, pc)
				}
			}
			// A replay inside the window is refused even after the purge ran.
			r := renew()
			r.Nonce = "purge-nonce-0123456789abcdefgh"
			r.Timestamp = strconv.FormatInt(now, 10)
			code, _ := e.send(e.signedRequest(r))
			require.Equal(t, 200, code)
			e.clock.Advance(59 * time.Second)
			_, err := authn.PurgeNonces(e.ctx(), e.store, e.clock)
			require.NoError(t, err)
			code, pc := e.send(e.signedRequest(r))
			require.Equal(t, 401, code)
			require.Contains(t, []string{protocol.CodeNonceReused}, pc)
			e.clock.Advance(-59 * time.Second)
		})

		t.Run("S4 ambiguous paths are refused", func(t *testing.T) {
			for _, p := range []string{"/v1/runner//heartbeat", "/v1/runner/./heartbeat", "/v1/runner/x/../heartbeat",
				"/v1/runner%2Fheartbeat", "/v1/runner/heart%62eat", "/v1/runner/heartbeat;x", "/v1/runner/heartbeat/"} {
				r := rawSigned{Path: p, Body: []byte(`{}`), Runner: rc.RunnerID, Key: key}
				code, _ := e.send(e.signedRequest(r))
				require.Contains(t, []int{400, 401, 404}, code, p)
				require.NotEqual(t, 200, code, p)
			}
		})

		t.Run("S5 another runner's key does not verify", func(t *testing.T) {
			other := e.runner()
			r := renew()
			r.Key = other.Key // runner A's ID, runner B's signature
			code, pc := e.send(e.signedRequest(r))
			require.Equal(t, 401, code)
			require.Equal(t, protocol.CodeSignatureInvalid, pc)
		})

		t.Run("S6 malformed material", func(t *testing.T) {
			for name, mut := range map[string]func(r *http.Request){
				"short signature": func(r *http.Request) { r.Header.Set(protocol.HeaderSignature, "AAAA") },
				"bad base64":      func(r *http.Request) { r.Header.Set(protocol.HeaderSignature, "!!!not base64!!!") },
				"short nonce":     func(r *http.Request) { r.Header.Set(protocol.HeaderNonce, "abc") },
				"bad timestamp":   func(r *http.Request) { r.Header.Set(protocol.HeaderTimestamp, "12e9") },
				"huge header":     func(r *http.Request) { r.Header.Set(protocol.HeaderRunner, strings.Repeat("x", 100000)) },
			} {
				code, pc := e.send(func() *http.Request { req := e.signedRequest(renew()); mut(req); return req }())
				require.Contains(t, []int{400, 401, 431}, code, "%s: %s", name, pc)
			}
			_, pub := mustKey(t)
			tok, err := e.admin.CreateRegistrationToken(e.ctx(), protocol.RegistrationTokenRequest{})
			require.NoError(t, err)
			req, _ := http.NewRequest(http.MethodPost, e.srv.URL+"/v1/runner/register", strings.NewReader(`{"name":"x","public_key":"`+protocol.EncodeKey(pub[:31])+`"}`))
			req.Header.Set("Authorization", "Bearer "+tok.Token)
			code, pc := e.send(req)
			require.Equal(t, 400, code)
			require.Equal(t, protocol.CodeBadRequest, pc)
		})

		t.Run("S8 oversized body", func(t *testing.T) {
			r := rawSigned{Path: "/v1/runner/attempt/logs", Body: []byte(`{"seq":1,"lines":[{"stream":"stdout","text":"` + strings.Repeat("a", protocol.MaxBodyBytes) + `"}]}`),
				Runner: rc.RunnerID, Key: key, Run: ref.RunID, Attempt: ref.AttemptID, Lease: ref.LeaseToken}
			code, pc := e.send(e.signedRequest(r))
			require.Equal(t, 413, code)
			require.Equal(t, protocol.CodeTooLarge, pc)
		})

		t.Run("registration tokens are single use", func(t *testing.T) {
			tok, err := e.admin.CreateRegistrationToken(e.ctx(), protocol.RegistrationTokenRequest{})
			require.NoError(t, err)
			_, pub := mustKey(t)
			body := `{"name":"x","public_key":"` + protocol.EncodeKey(pub) + `"}`
			for i, want := range []int{201, 401} {
				req, _ := http.NewRequest(http.MethodPost, e.srv.URL+"/v1/runner/register", strings.NewReader(body))
				req.Header.Set("Authorization", "Bearer "+tok.Token)
				code, pc := e.send(req)
				require.Equal(t, want, code, "use %d: %s", i, pc)
				if want == 401 {
					require.Equal(t, protocol.CodeRegistrationTokenInvalid, pc)
				}
			}
			e.clock.Advance(2 * time.Hour)
			defer e.clock.Advance(-2 * time.Hour)
			tok2, err := e.admin.CreateRegistrationToken(e.ctx(), protocol.RegistrationTokenRequest{TTLSeconds: 60})
			require.NoError(t, err)
			e.clock.Advance(61 * time.Second)
			req, _ := http.NewRequest(http.MethodPost, e.srv.URL+"/v1/runner/register", strings.NewReader(body))
			req.Header.Set("Authorization", "Bearer "+tok2.Token)
			code, pc := e.send(req)
			require.Equal(t, 401, code, pc)
			e.clock.Advance(-61 * time.Second)
		})

		t.Run("result with unknown artifact", func(t *testing.T) {
			r := renew()
			r.Path = "/v1/runner/attempt/result"
			r.Body = []byte(`{"outcome":"succeeded","exit_code":0,"summary":"","artifacts":["art_x"]}`)
			code, pc := e.send(e.signedRequest(r))
			require.Equal(t, 422, code)
			require.Equal(t, protocol.CodeArtifactInvalid, pc)
		})

		t.Run("key rotation retires the old key at once", func(t *testing.T) {
			priv, _ := mustKey(t)
			old := rc.Key
			require.NoError(t, rc.RotateKey(e.ctx(), priv))
			r := renew()
			r.Key = old
			code, pc := e.send(e.signedRequest(r))
			require.Equal(t, 401, code)
			require.Equal(t, protocol.CodeSignatureInvalid, pc)
			r.Key = priv
			code, pc = e.send(e.signedRequest(r))
			require.Equal(t, 200, code, pc)
			key = priv
		})
	})
}

func mustKey(t *testing.T) (ed25519.PrivateKey, ed25519.PublicKey) {
	t.Helper()
	pub, priv, err := ed25519.GenerateKey(rand.Reader)
	require.NoError(t, err)
	return priv, pub
}

func setBody(r *http.Request, b []byte) {
	r.Body = nopCloser{strings.NewReader(string(b))}
	r.ContentLength = int64(len(b))
}

type nopCloser struct{ *strings.Reader }

func (nopCloser) Close() error { return nil }

func flip(sig string) string {
	b := []byte(sig)
	if b[0] == 'A' {
		b[0] = 'B'
	} else {
		b[0] = 'A'
	}
	return string(b)
}
