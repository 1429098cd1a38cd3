package executor

import "testing"

func TestWorkdir(t *testing.T) {
	for _, tc := range []struct{ wd, want, err string }{
		{"", "/jobplane/workspace", ""},
		{"sub/dir", "/jobplane/workspace/sub/dir", ""},
		{"./sub/../dir", "/jobplane/workspace/dir", ""},
		{"/etc", "/etc", ""},
		{"/etc/../opt/", "/opt", ""},
		{"..", "", `workdir ".." leaves the workspace`},
		{"../../etc", "", `workdir "../../etc" leaves the workspace`},
		{"sub/../../x", "", `workdir "sub/../../x" leaves the workspace`},
	} {
		got, err := Workdir("/jobplane/workspace", tc.wd)
		if tc.err != "" {
			if err == nil || err.Error() != tc.err {
				t.Errorf("Workdir(%q) = %q, %v; want error %q", tc.wd, got, err, tc.err)
			}
			continue
		}
		if err != nil || got != tc.want {
			t.Errorf("Workdir(%q) = %q, %v; want %q", tc.wd, got, err, tc.want)
		}
	}
}
