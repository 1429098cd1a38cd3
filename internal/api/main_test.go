package api_test

import (
	"flag"
	"os"
	"testing"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	flag.Parse()
	// Property tests run 25 random histories per store by default; the long
	// tier (JOBPLANE_LONG=1) runs the rapid default or whatever -rapid.checks says.
	if os.Getenv("JOBPLANE_LONG") == "" && flag.Lookup("rapid.checks").Value.String() == "100" {
		_ = flag.Set("rapid.checks", "25")
	}
	goleak.VerifyTestMain(m)
}
