package failpoint

import (
	"testing"

	"github.com/stretchr/testify/require"
)

func TestEnableAndParse(t *testing.T) {
	require.NoError(t, Inject("x"))
	off := Enable("x", func() error { return ErrInjected })
	require.ErrorIs(t, Inject("x"), ErrInjected)
	off()
	require.NoError(t, Inject("x"))

	require.NoError(t, parse("a=error, b=sleep(1ms)"))
	require.ErrorIs(t, Inject("a"), ErrInjected)
	require.NoError(t, Inject("b"))
	require.Error(t, parse("c=explode"))
	require.Error(t, parse("nonsense"))
}
