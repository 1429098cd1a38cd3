package protocol_test

import (
	"crypto/ed25519"
	"encoding/hex"
	"net/url"
	"path"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/jobplane/jobplane/internal/protocol"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// TestRFC8032 (S9, K): the Ed25519 known answers of RFC 8032 §7.1, tests
// 1–3, through crypto/ed25519 and through protocol's key decoding.
func TestRFC8032(t *testing.T) {
	t.Parallel()
	vectors := []struct{ name, secret, public, message, signature string }{
		{"test 1",
			"9d61b19deffd5a60ba844af492ec2cc44449c5697b326919703bac031cae7f60",
			"d75a980182b10ab7d54bfed3c964073a0ee172f3daa62325af021a68f707511a",
			"",
			"e5564300c360ac729086e2cc806e828a84877f1eb8e5d974d873e065224901555fb8821590a33bacc61e39701cf9b46bd25bf5f0595bbe24655141438e7a100b"},
		{"test 2",
			"4ccd089b28ff96da9db6c346ec114e0f5b8a319f35aba624da8cf6ed4fb8a6fb",
			"3d4017c3e843895a92b70aa74d1b7ebc9c982ccf2ec4968cc0cd55f12af4660c",
			"72",
			"92a009a9f0d4cab8720e820b5f642540a2b27b5416503f8fb3762223ebdb69da085ac1e43e15996e458f3613d0f11d8c387b2eaeb4302aeeb00d291612bb0c00"},
		{"test 3",
			"c5aa8df43f9f837bedb7442f31dcb7b166d38535076f094b85ce3a2e0b4458f7",
			"fc51cd8e6218a1a38da47ed00230f0580816ed13ba3303ac5deb911548908025",
			"af82",
			"6291d657deec24024827e69c3abe01a30ce548a284743a445e3680d7db5ac3ac18ff9b538d16f290ae67f760984dc6594a7c15e9716ed28dc027beceea1ec40a"},
	}
	unhex := func(s string) []byte {
		b, err := hex.DecodeString(s)
		require.NoError(t, err)
		return b
	}
	for _, v := range vectors {
		t.Run(v.name, func(t *testing.T) {
			t.Parallel()
			key := ed25519.NewKeyFromSeed(unhex(v.secret))
			pub := key.Public().(ed25519.PublicKey)
			require.Equal(t, v.public, hex.EncodeToString(pub))
			msg := unhex(v.message)
			require.Equal(t, v.signature, hex.EncodeToString(ed25519.Sign(key, msg)))
			require.True(t, ed25519.Verify(pub, msg, unhex(v.signature)))
			// The wire form of the key decodes to the same key.
			dec, err := protocol.DecodePublicKey(protocol.EncodeKey(pub))
			require.NoError(t, err)
			require.True(t, ed25519.Verify(dec, msg, unhex(v.signature)))
			// One flipped bit of the message or the signature fails.
			bad := unhex(v.signature)
			bad[0] ^= 1
			require.False(t, ed25519.Verify(pub, msg, bad))
			require.False(t, ed25519.Verify(pub, append(msg, 0), unhex(v.signature)))
		})
	}
}

// FuzzCanonicalPath (S4, F): for any path, either CheckPath rejects it, or
// the path the signature covers is the path the router dispatches on: it is
// already clean (path.Clean, as http.ServeMux cleans), unescaping changes
// nothing, and URL parsing yields it as URL.Path unchanged.
func FuzzCanonicalPath(f *testing.F) {
	for _, p := range []string{
		"/v1/runner/claim", "/", "", "v1/runner", "//v1", "/v1//runner", "/v1/./runner", "/v1/../runner",
		"/a/../b", "/v1/runner/", "/v1/%2F", "/v1/%2f", "/%2e%2e/x", "/%252e", `/v1\runner`, "/v1;x",
		"/v1/runner/claim;x", "/caf\u00e9", "/cafe\u0301", "/v1?x=1", "/v1#f", "/v1/ runner", "/v1/\x00",
		"/v1/runner/.", "/..", "/.", "/v1/runner/...", "/~user/a-b_c.d", "/v1/runner/attempt/result",
		"/0\"", // URL.EscapedPath re-escapes '"', but URL.Path (what is routed) is unchanged
	} {
		f.Add(p)
	}
	f.Fuzz(func(t *testing.T, p string) {
		if protocol.CheckPath(p) != nil {
			return
		}
		require.Equal(t, p, path.Clean(p), "accepted a path the router would clean to another")
		un, err := url.PathUnescape(p)
		require.NoError(t, err)
		require.Equal(t, p, un, "accepted a path that unescapes to another")
		u, err := url.ParseRequestURI(p)
		require.NoError(t, err)
		require.Equal(t, p, u.Path, "the router dispatches on URL.Path")
		require.Empty(t, u.RawQuery)
		require.Empty(t, u.Fragment)
	})
}

// FuzzCanonicalMessage (F): CanonicalMessage never panics, and an accepted
// request whose header fields are valid HTTP field values (no CR, LF or
// NUL, which net/http never delivers) yields exactly 11 lines, the fields in
// their places.
func FuzzCanonicalMessage(f *testing.F) {
	f.Add("POST", "/v1/runner/attempt/result", "", "1798761600", "AAECAwQFBgcICQoLDA0ODw", "rnr_1", "run_1", "att_1", "lease", []byte(`{}`))
	f.Add("GET", "/v1/runner/example", "c=/&b=x y&a=2&a=1", "1798761600", "ZmVkY2JhOTg3NjU0MzIxMA", "rnr_1", "", "", "", []byte{})
	f.Add("get", "/v1/x", "a=%zz", "", "", "", "", "", "", []byte(nil))
	f.Add("POST", "/v1/x", "a=1&a=1&b", "1", "n", "r", "ru\nn", "a", "l", []byte("\n\n"))
	f.Add("POST", "/v1/x", "k=%0Av", "1", "n", "r", "", "", "", []byte{})
	f.Fuzz(func(t *testing.T, method, p, query, ts, nonce, runner, run, attempt, lease string, body []byte) {
		r := &protocol.SignedRequest{Method: method, Path: p, RawQuery: query, Timestamp: ts, Nonce: nonce,
			Runner: runner, Run: run, Attempt: attempt, Lease: lease, Body: body}
		msg, err := protocol.CanonicalMessage(r)
		if err != nil {
			require.Empty(t, msg)
			return
		}
		for _, v := range []string{method, ts, nonce, runner, run, attempt} {
			if strings.ContainsAny(v, "\r\n\x00") {
				return // not a value an HTTP request can carry; see the report
			}
		}
		lines := strings.Split(msg, "\n")
		require.Len(t, lines, 11, "message %q", msg)
		require.Equal(t, protocol.SignatureVersion, lines[0])
		require.Equal(t, strings.ToUpper(method), lines[1])
		require.Equal(t, p, lines[2])
		require.Equal(t, []string{ts, nonce, runner, run, attempt}, lines[4:9])
		require.Equal(t, protocol.SHA256Hex(body), lines[10])
		if lease == "" {
			require.Empty(t, lines[9])
		} else {
			require.Equal(t, protocol.SHA256Hex([]byte(lease)), lines[9])
		}
		// The canonical query is a fixpoint.
		again, err := protocol.CanonicalQuery(lines[3])
		require.NoError(t, err)
		require.Equal(t, lines[3], again)
	})
}
