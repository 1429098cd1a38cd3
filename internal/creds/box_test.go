package creds

import (
	"bytes"
	"encoding/base64"
	"encoding/hex"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestBoxRoundTrip(t *testing.T) {
	key := bytes.Repeat([]byte{7}, 32)
	box, err := NewBox(key)
	require.NoError(t, err)
	ad := SecretAD("acme", "DB_PASSWORD", "prod")
	pt := []byte("hunter2-hunter2")

	sealed := box.Seal(pt, ad)
	require.Equal(t, byte(1), sealed[0], "versioned format")
	require.Len(t, sealed, 1+12+len(pt)+16)
	require.False(t, bytes.Contains(sealed, pt))
	require.NotEqual(t, sealed, box.Seal(pt, ad), "random nonce")

	got, err := box.Open(sealed, ad)
	require.NoError(t, err)
	require.Equal(t, pt, got)

	empty := box.Seal(nil, ad)
	got, err = box.Open(empty, ad)
	require.NoError(t, err)
	require.Empty(t, got)

	// Wrong associated data: the row copied to another name/channel/tenant.
	for _, other := range [][]byte{
		SecretAD("acme", "DB_PASSWORD2", "prod"),
		SecretAD("acme", "DB_PASSWORD", "staging"),
		SecretAD("other", "DB_PASSWORD", "prod"),
		SecretAD("acme", "DB_PASSWORDprod", ""), // length prefixes keep fields apart
		nil,
	} {
		_, err := box.Open(sealed, other)
		require.ErrorIs(t, err, ErrSealedInvalid)
	}

	// Tamper with every byte position in turn.
	for i := range sealed {
		bad := bytes.Clone(sealed)
		bad[i] ^= 0x01
		_, err := box.Open(bad, ad)
		require.ErrorIs(t, err, ErrSealedInvalid, "byte %d", i)
	}
	for _, bad := range [][]byte{nil, {1}, sealed[:len(sealed)-1], sealed[:28]} {
		_, err := box.Open(bad, ad)
		require.ErrorIs(t, err, ErrSealedInvalid)
	}

	// Wrong key.
	other, err := NewBox(bytes.Repeat([]byte{8}, 32))
	require.NoError(t, err)
	_, err = other.Open(sealed, ad)
	require.ErrorIs(t, err, ErrSealedInvalid)

	_, err = NewBox(make([]byte, 16))
	require.Error(t, err, "AES-128 key refused")
}

func TestServerKeyEnv(t *testing.T) {
	key := bytes.Repeat([]byte{0xab}, 32)
	dir := t.TempDir()
	for _, enc := range []string{
		base64.RawURLEncoding.EncodeToString(key),
		base64.URLEncoding.EncodeToString(key),
		base64.StdEncoding.EncodeToString(key),
		hex.EncodeToString(key),
		" " + hex.EncodeToString(key) + "\n",
	} {
		got, err := LoadOrCreateServerKey(dir, enc)
		require.NoError(t, err)
		require.Equal(t, key, got)
	}
	_, err := os.Stat(filepath.Join(dir, ServerKeyFile))
	require.True(t, os.IsNotExist(err), "env override never touches the file")

	for _, bad := range []string{"short", hex.EncodeToString(key[:31]), base64.RawURLEncoding.EncodeToString(append(key, 1))} {
		_, err := LoadOrCreateServerKey(dir, bad)
		require.Error(t, err)
		require.NotContains(t, err.Error(), bad, "never echo the value")
	}
}

func TestServerKeyFile(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "data")
	k1, err := LoadOrCreateServerKey(dir, "")
	require.NoError(t, err)
	require.Len(t, k1, 32)

	path := filepath.Join(dir, ServerKeyFile)
	fi, err := os.Stat(path)
	require.NoError(t, err)
	require.Equal(t, os.FileMode(0o600), fi.Mode().Perm())

	k2, err := LoadOrCreateServerKey(dir, "")
	require.NoError(t, err)
	require.Equal(t, k1, k2, "second start reads the same key")

	entries, err := os.ReadDir(dir)
	require.NoError(t, err)
	require.Len(t, entries, 1, "no temporary files left behind")

	require.NoError(t, os.Chmod(path, 0o644))
	_, err = LoadOrCreateServerKey(dir, "")
	require.ErrorContains(t, err, "group or others")
	require.NoError(t, os.Chmod(path, 0o600))

	require.NoError(t, os.WriteFile(path, []byte("garbage"), 0o600))
	_, err = LoadOrCreateServerKey(dir, "")
	require.Error(t, err)
	require.False(t, strings.Contains(err.Error(), "garbage"))
}

func TestServerKeyConcurrentCreate(t *testing.T) {
	for range 20 {
		dir := t.TempDir()
		const n = 8
		keys := make([][]byte, n)
		errs := make([]error, n)
		var wg sync.WaitGroup
		for i := range n {
			wg.Go(func() { keys[i], errs[i] = LoadOrCreateServerKey(dir, "") })
		}
		wg.Wait()
		for i := range n {
			require.NoError(t, errs[i])
			require.Equal(t, keys[0], keys[i], "all starters agree on one key")
		}
		entries, err := os.ReadDir(dir)
		require.NoError(t, err)
		require.Len(t, entries, 1)
	}
}
