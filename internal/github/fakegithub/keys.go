package fakegithub

import (
	"crypto/rand"
	"crypto/rsa"
	"sync"
	"testing"
)

var (
	keyMu sync.Mutex
	keys  = map[int]*rsa.PrivateKey{}
)

// Key returns RSA test key number n (2048 bits), generated once per test
// binary: key generation is slow under -race and the keys are not secret.
func Key(t testing.TB, n int) *rsa.PrivateKey {
	t.Helper()
	keyMu.Lock()
	defer keyMu.Unlock()
	if k := keys[n]; k != nil {
		return k
	}
	k, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	keys[n] = k
	return k
}
