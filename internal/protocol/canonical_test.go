package protocol

import (
	"crypto/ed25519"
	"encoding/hex"
	"testing"

	"github.com/stretchr/testify/require"
)

func vectorKey(t *testing.T) ed25519.PrivateKey {
	t.Helper()
	seed, err := hex.DecodeString("000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f")
	require.NoError(t, err)
	return ed25519.NewKeyFromSeed(seed)
}

func TestVectors(t *testing.T) {
	t.Parallel()
	key := vectorKey(t)
	require.Equal(t, "A6EHv_POEL4dcN0Y50vAmWfk1jCbpQ1fHdyGZBJVMbg", EncodeKey(key.Public().(ed25519.PublicKey)))

	tests := []struct {
		name    string
		req     SignedRequest
		message string
		sig     string
	}{
		{
			name: "vector 1",
			req: SignedRequest{
				Method: "POST", Path: "/v1/runner/attempt/result", Timestamp: "1798761600",
				Nonce: "AAECAwQFBgcICQoLDA0ODw", Runner: "rnr_01HZX3Q9V6S8K2M4N5P7R9T1W3",
				Run: "run_01HZX3QA0000000000000000", Attempt: "att_01HZX3QB0000000000000000",
				Lease: "lease-token-example",
				Body:  []byte(`{"outcome":"succeeded","exit_code":0,"summary":"ok","artifacts":[]}`),
			},
			message: "JOBPLANE-RUNNER-V1\nPOST\n/v1/runner/attempt/result\n\n1798761600\nAAECAwQFBgcICQoLDA0ODw\nrnr_01HZX3Q9V6S8K2M4N5P7R9T1W3\nrun_01HZX3QA0000000000000000\natt_01HZX3QB0000000000000000\n32c8ebb078b577414d9b4e4a288fa9cf819410639a278804b806a6236edcc379\na1d8ee2f77d8f8f379878dd6e773aa6cde84db6f678da0315a5e2a1cc86e8a24",
			sig:     "ZGUxTLVINiWmaDX0wTY5-_Jlt6XNVn6fHKOr6Z8JCwiOZiQOcjnoUMJ_YrAQVLwEGHN2e_iHAjrsWA3OMl9ECQ",
		},
		{
			name: "vector 2",
			req: SignedRequest{
				Method: "GET", Path: "/v1/runner/example", RawQuery: "c=/&b=x y&a=2&a=1",
				Timestamp: "1798761600", Nonce: "ZmVkY2JhOTg3NjU0MzIxMA", Runner: "rnr_01HZX3Q9V6S8K2M4N5P7R9T1W3",
			},
			message: "JOBPLANE-RUNNER-V1\nGET\n/v1/runner/example\na=1&a=2&b=x+y&c=%2F\n1798761600\nZmVkY2JhOTg3NjU0MzIxMA\nrnr_01HZX3Q9V6S8K2M4N5P7R9T1W3\n\n\n\ne3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855",
			sig:     "Lme5L92-pKeugU_RoHoNNB-RvdHMqrcjTTh-xkspO7_QCwEjm1Sr-9nOGII3W8ibkn6nkphuwlowpzLKQ6cbDQ",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got, err := CanonicalMessage(&tt.req)
			require.NoError(t, err)
			require.Equal(t, tt.message, got)
			sig, err := Sign(key, &tt.req)
			require.NoError(t, err)
			require.Equal(t, tt.sig, sig)
			require.True(t, Verify(key.Public().(ed25519.PublicKey), &tt.req, tt.sig))
		})
	}
}

func TestLineBreaksInFieldsAreRefused(t *testing.T) {
	t.Parallel()
	for _, r := range []SignedRequest{
		{Method: "POST", Path: "/v1/x", Run: "a\nb", Attempt: "c"},
		{Method: "POST", Path: "/v1/x", Run: "a", Attempt: "b\rc"},
		{Method: "PO\nST", Path: "/v1/x"},
		{Method: "POST", Path: "/v1/x", Nonce: "n\n"},
	} {
		_, err := CanonicalMessage(&r)
		require.ErrorIs(t, err, ErrFieldNotCanonical)
	}
}
