package creds

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"encoding/base64"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
)

const (
	// ServerKeySize is the size of the server key (AES-256).
	ServerKeySize = 32
	// ServerKeyFile is the file name under the data directory.
	ServerKeyFile = "secret.key"
	// EnvServerKey names the environment variable that overrides the file.
	EnvServerKey = "JOBPLANE_SECRET_KEY"

	boxVersion1 = 0x01
	nonceSize   = 12
)

// Box seals and opens values with AES-256-GCM under the server key.
//
// Format: version byte (0x01) ‖ 96-bit random nonce ‖ ciphertext ‖ tag. The
// version byte is also authenticated (prefixed to the associated data) so a
// future format cannot be confused with this one. Random nonces are safe for
// well over 2^32 seals under one key, far beyond the number of secrets and
// signing keys a server stores.
type Box struct {
	aead cipher.AEAD
}

// NewBox returns a Box for a 32-byte key.
func NewBox(key []byte) (*Box, error) {
	if len(key) != ServerKeySize {
		return nil, fmt.Errorf("creds: server key must be %d bytes", ServerKeySize)
	}
	block, err := aes.NewCipher(key)
	if err != nil {
		return nil, err
	}
	aead, err := cipher.NewGCM(block)
	if err != nil {
		return nil, err
	}
	return &Box{aead: aead}, nil
}

// Seal encrypts plaintext bound to associatedData (see SecretAD).
func (b *Box) Seal(plaintext, associatedData []byte) []byte {
	out := make([]byte, 1+nonceSize, 1+nonceSize+len(plaintext)+b.aead.Overhead())
	out[0] = boxVersion1
	_, _ = rand.Read(out[1 : 1+nonceSize]) // never fails (aborts instead)
	return b.aead.Seal(out, out[1:1+nonceSize], plaintext, versionedAD(boxVersion1, associatedData))
}

// Open decrypts sealed, which must have been sealed with the same key and
// associated data. Any failure is ErrSealedInvalid.
func (b *Box) Open(sealed, associatedData []byte) ([]byte, error) {
	if len(sealed) < 1+nonceSize+b.aead.Overhead() || sealed[0] != boxVersion1 {
		return nil, ErrSealedInvalid
	}
	pt, err := b.aead.Open(nil, sealed[1:1+nonceSize], sealed[1+nonceSize:], versionedAD(boxVersion1, associatedData))
	if err != nil {
		return nil, ErrSealedInvalid
	}
	return pt, nil
}

func versionedAD(v byte, ad []byte) []byte {
	out := make([]byte, 0, 1+len(ad))
	return append(append(out, v), ad...)
}

// SecretAD is the associated data of a secret value: it binds the ciphertext
// to its tenant, name and channel, so a row copied to another name, channel
// or tenant fails to open. Fields are length-prefixed, so ("a","bc") and
// ("ab","c") differ.
func SecretAD(tenant, name, channel string) []byte {
	return lengthPrefixed("jobplane/secret/v1", tenant, name, channel)
}

func keyAD(kid string) []byte {
	return lengthPrefixed("jobplane/signing-key/v1", kid)
}

func lengthPrefixed(fields ...string) []byte {
	var out []byte
	for _, f := range fields {
		out = binary.BigEndian.AppendUint32(out, uint32(len(f)))
		out = append(out, f...)
	}
	return out
}

// ParseServerKey decodes a 32-byte key given as hex (64 characters) or
// base64url / base64 (padded or not). Errors never include the value.
func ParseServerKey(s string) ([]byte, error) {
	s = strings.TrimSpace(s)
	if len(s) == 2*ServerKeySize {
		if k, err := hex.DecodeString(s); err == nil {
			return k, nil
		}
	}
	for _, enc := range []*base64.Encoding{base64.RawURLEncoding, base64.URLEncoding, base64.RawStdEncoding, base64.StdEncoding} {
		if k, err := enc.Strict().DecodeString(s); err == nil && len(k) == ServerKeySize {
			return k, nil
		}
	}
	return nil, fmt.Errorf("creds: server key is not %d bytes of hex or base64url", ServerKeySize)
}

// LoadOrCreateServerKey returns the server key: env (the value of
// JOBPLANE_SECRET_KEY) if non-empty, else the key in dataDir/secret.key,
// creating it (mode 0600) if it does not exist.
//
// Creation is exclusive and atomic: the key is written to a private temporary
// file and hard-linked into place, which fails if the name exists, so two
// servers starting at once end up with the same key and a reader never sees a
// partly written file. An existing key file readable by group or others is
// refused, as ssh does, rather than silently trusted.
func LoadOrCreateServerKey(dataDir string, env string) ([]byte, error) {
	if env != "" {
		k, err := ParseServerKey(env)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", EnvServerKey, err)
		}
		return k, nil
	}
	if dataDir == "" {
		return nil, errors.New("creds: data directory required for the server key")
	}
	path := filepath.Join(dataDir, ServerKeyFile)
	k, err := readServerKey(path)
	if err == nil || !errors.Is(err, fs.ErrNotExist) {
		return k, err
	}
	if err := os.MkdirAll(dataDir, 0o700); err != nil {
		return nil, err
	}
	key := make([]byte, ServerKeySize)
	_, _ = rand.Read(key)
	tmp, err := os.CreateTemp(dataDir, ".secret.key-*")
	if err != nil {
		return nil, err
	}
	defer os.Remove(tmp.Name())
	if err := tmp.Chmod(0o600); err != nil {
		tmp.Close()
		return nil, err
	}
	if _, err := tmp.WriteString(base64.RawURLEncoding.EncodeToString(key) + "\n"); err != nil {
		tmp.Close()
		return nil, err
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		return nil, err
	}
	if err := tmp.Close(); err != nil {
		return nil, err
	}
	if err := os.Link(tmp.Name(), path); err != nil {
		if errors.Is(err, fs.ErrExist) {
			return readServerKey(path) // another server won the race
		}
		return nil, err
	}
	syncDir(dataDir)
	return key, nil
}

func readServerKey(path string) ([]byte, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return nil, err
	}
	if !fi.Mode().IsRegular() {
		return nil, fmt.Errorf("creds: %s is not a regular file", path)
	}
	if fi.Mode().Perm()&0o077 != 0 {
		return nil, fmt.Errorf("creds: %s is accessible by group or others (mode %v); chmod 600 it", path, fi.Mode().Perm())
	}
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	k, err := ParseServerKey(string(data))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return k, nil
}

func syncDir(dir string) {
	if d, err := os.Open(dir); err == nil {
		_ = d.Sync()
		_ = d.Close()
	}
}
