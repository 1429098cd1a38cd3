package kube

import (
	"reflect"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/jobplane/jobplane/internal/executor"
)

func TestLabelValue(t *testing.T) {
	for _, v := range []string{"", "att-1", "acme", "a.b_c-d", strings.Repeat("x", 63)} {
		if got := LabelValue(v); got != v {
			t.Errorf("LabelValue(%q) = %q, want it unchanged", v, got)
		}
	}
	for _, v := range []string{"build/Test job", "-lead", "trail-", strings.Repeat("x", 64), "naïve", "a\nb", "x=y"} {
		got := LabelValue(v)
		if got == v || len(validation.IsValidLabelValue(got)) > 0 {
			t.Errorf("LabelValue(%q) = %q: not replaced by a valid value", v, got)
		}
		if LabelValue(v) != got {
			t.Errorf("LabelValue(%q) is not stable", v)
		}
	}
	if LabelValue("a/b") == LabelValue("a/c") {
		t.Error("two values share a label")
	}
}

func FuzzLabelValue(f *testing.F) {
	for _, s := range []string{"", "att-1", "build/Test job", strings.Repeat("x", 64), "-", "é"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, v string) {
		if errs := validation.IsValidLabelValue(LabelValue(v)); len(errs) > 0 {
			t.Fatalf("LabelValue(%q) = %q: %v", v, LabelValue(v), errs)
		}
	})
}

func TestObjectName(t *testing.T) {
	n := ObjectName("runner-1", "Attempt/ID with spaces")
	if errs := validation.IsDNS1123Label(n); len(errs) > 0 || len(n+"-env") > 63 {
		t.Errorf("ObjectName = %q: %v", n, errs)
	}
	if ObjectName("r1", "a") == ObjectName("r2", "a") || ObjectName("r", "a1") == ObjectName("r", "a2") {
		t.Error("names collide")
	}
}

func TestDeadlineSeconds(t *testing.T) {
	from := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	for _, c := range []struct {
		until time.Duration
		want  int64
	}{
		{60 * time.Second, 57},
		{60*time.Second + 900*time.Millisecond, 57},
		{4 * time.Second, 1},
		{time.Second, 1},
		{-time.Minute, 1},
	} {
		if got := deadlineSeconds(from, from.Add(c.until)); got != c.want {
			t.Errorf("deadlineSeconds(+%v) = %d, want %d", c.until, got, c.want)
		}
	}
}

func TestTerminated(t *testing.T) {
	for _, c := range []struct {
		in   corev1.ContainerStateTerminated
		want executor.Exit
	}{
		{corev1.ContainerStateTerminated{ExitCode: 0, Reason: "Completed"}, executor.Exit{Code: 0, Summary: "exit status 0"}},
		{corev1.ContainerStateTerminated{ExitCode: 3, Reason: "Error"}, executor.Exit{Code: 3, Summary: "exit status 3"}},
		{corev1.ContainerStateTerminated{ExitCode: 137, Reason: "OOMKilled"}, executor.Exit{Code: 137, Reason: executor.ReasonOOMKilled, Summary: "out of memory (OOMKilled)"}},
		{corev1.ContainerStateTerminated{ExitCode: 0, Signal: 9}, executor.Exit{Code: 137, Summary: "killed by signal 9"}},
	} {
		if got := terminated(&c.in); !reflect.DeepEqual(got, c.want) {
			t.Errorf("terminated(%+v) = %+v, want %+v", c.in, got, c.want)
		}
	}
}
