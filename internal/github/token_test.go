package github

import (
	"bytes"
	"encoding/json"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestTokenNeverPrinted(t *testing.T) {
	t.Parallel()
	const secret = "ghs_SECRETVALUE123"
	tok := Token{value: secret, ExpiresAt: time.Unix(0, 0)}
	holder := struct {
		T   Token
		Ptr *Token
	}{tok, &tok}

	var outs []string
	for _, verb := range []string{"%v", "%+v", "%#v", "%s", "%q", "%x", "%X"} {
		outs = append(outs, fmt.Sprintf(verb, tok), fmt.Sprintf(verb, holder), fmt.Sprintf(verb, &tok))
	}
	outs = append(outs, tok.String(), fmt.Sprint(tok), fmt.Sprintln(holder))
	js, err := json.Marshal(holder)
	require.NoError(t, err)
	outs = append(outs, string(js))
	var logs bytes.Buffer
	for _, h := range []slog.Handler{slog.NewJSONHandler(&logs, nil), slog.NewTextHandler(&logs, nil)} {
		slog.New(h).Info("token", "token", tok, "ptr", &tok, "holder", holder)
	}
	outs = append(outs, logs.String())
	for _, o := range outs {
		require.NotContains(t, o, "SECRETVALUE", o)
		require.NotContains(t, strings.ToLower(o), "5345435245", o) // hex of "SECRE"
	}
	require.Equal(t, secret, tok.reveal())
}
