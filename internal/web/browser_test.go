package web_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/require"

	"github.com/jobplane/jobplane/internal/protocol"
	"github.com/jobplane/jobplane/internal/store"
)

// findBrowser returns Chromium's path. Without one the browser tests skip,
// unless JOBPLANE_TEST_REQUIRE_BROWSER=1 (CI) makes that a failure.
func findBrowser(t *testing.T) string {
	t.Helper()
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome", "headless-shell"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	if os.Getenv("JOBPLANE_TEST_REQUIRE_BROWSER") == "1" {
		t.Fatal("no Chromium found (JOBPLANE_TEST_REQUIRE_BROWSER=1): install it with apt-get install -y chromium")
	}
	t.Skip("no Chromium found; install it (apt-get install -y chromium) to run the browser tests")
	return ""
}

// browser is one headless Chromium for a test.
type browser struct {
	t     *testing.T
	alloc context.Context
	base  string
	shots string
}

func newBrowser(t *testing.T, e *env) *browser {
	t.Helper()
	path := findBrowser(t)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	t.Cleanup(cancel)
	alloc, cancelAlloc := chromedp.NewExecAllocator(ctx,
		chromedp.ExecPath(path),
		chromedp.Headless, chromedp.NoSandbox, chromedp.DisableGPU, chromedp.NoFirstRun, chromedp.NoDefaultBrowserCheck,
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.UserDataDir(t.TempDir()),
		chromedp.WindowSize(1280, 900),
	)
	t.Cleanup(cancelAlloc)
	// The first context starts the browser; tabs open their own browser
	// contexts in it.
	root, cancelRoot := chromedp.NewContext(alloc)
	t.Cleanup(cancelRoot)
	require.NoError(t, chromedp.Do(root), "start Chromium at %s", path)
	return &browser{t: t, alloc: root, base: e.url, shots: t.TempDir()}
}

// tab opens a tab in a browser context of its own (its own cookies), so
// that two users can be signed in at once. On failure it saves a screenshot
// under the test's temp dir.
func (b *browser) tab(name string) context.Context {
	b.t.Helper()
	ctx, cancel := chromedp.NewContext(b.alloc, chromedp.WithNewBrowserContext())
	b.t.Cleanup(cancel)
	b.t.Cleanup(func() {
		if !b.t.Failed() {
			return
		}
		sctx, scancel := context.WithTimeout(ctx, 5*time.Second)
		defer scancel()
		png, err := chromedp.Run(sctx, chromedp.FullScreenshot(100))
		if err != nil {
			b.t.Logf("screenshot of %s failed: %v", name, err)
			return
		}
		// The test's temp dir goes when the test ends; set
		// JOBPLANE_TEST_SCREENSHOTS to a directory to keep a copy.
		dirs := []string{b.shots}
		if keep := os.Getenv("JOBPLANE_TEST_SCREENSHOTS"); keep != "" {
			dirs = append(dirs, keep)
		}
		for _, dir := range dirs {
			p := filepath.Join(dir, strings.ReplaceAll(b.t.Name(), "/", "_")+"-"+name+".png")
			if err := os.WriteFile(p, png, 0o600); err == nil {
				b.t.Logf("screenshot of %s: %s", name, p)
			}
		}
		if html, err := chromedp.Run(sctx, chromedp.OuterHTML(q("html"))); err == nil {
			b.t.Logf("page of %s:\n%s", name, html)
		}
	})
	return ctx
}

func (b *browser) do(ctx context.Context, steps ...chromedp.Action[chromedp.Void]) {
	b.t.Helper()
	require.NoError(b.t, chromedp.Do(ctx, steps...))
}

// waitJS waits until a JavaScript expression is true. A poll does not
// survive a navigation (a form post, a redirect), so it starts again in the
// new document until the deadline.
func waitJS(expr string) chromedp.Action[chromedp.Void] {
	return func(ctx context.Context, t *chromedp.Target) (chromedp.Void, error) {
		deadline := time.Now().Add(30 * time.Second)
		for {
			left := time.Until(deadline)
			if left <= 0 {
				return chromedp.Void{}, fmt.Errorf("wait for %s: timed out", expr)
			}
			_, err := chromedp.Poll[bool]("!!("+expr+")", chromedp.WithPollingInterval(50*time.Millisecond), chromedp.WithPollingTimeout(left))(ctx, t)
			if err == nil {
				return chromedp.Void{}, nil
			}
			if !navigated(err) || ctx.Err() != nil {
				return chromedp.Void{}, fmt.Errorf("wait for %s: %w", expr, err)
			}
		}
	}
}

func navigated(err error) bool {
	s := err.Error()
	return strings.Contains(s, "navigated") || strings.Contains(s, "context was destroyed") || strings.Contains(s, "Cannot find context")
}

func (b *browser) eval(ctx context.Context, expr string) bool {
	b.t.Helper()
	v, err := chromedp.Run(ctx, chromedp.Evaluate[bool]("!!("+expr+")"))
	require.NoError(b.t, err)
	return v
}

// requireLabelled checks that every form control on the page has a label.
func (b *browser) requireLabelled(ctx context.Context) {
	b.t.Helper()
	ok := b.eval(ctx, `[...document.querySelectorAll("input:not([type=hidden]), select, textarea")].every(el => el.labels.length > 0 || el.hasAttribute("aria-label"))`)
	loc, _ := chromedp.Run(ctx, chromedp.Location())
	require.True(b.t, ok, "a form control without a label on %s", loc)
}

func (b *browser) signIn(ctx context.Context, token, who string) {
	b.t.Helper()
	b.do(ctx,
		chromedp.Navigate(b.base+"/runs"),
		chromedp.WaitVisible(q("#token")),
		chromedp.SendKeys(q("#token"), token),
		chromedp.Click(q("form button[type=submit]")),
		waitJS(`document.querySelector("#who") && document.querySelector("#who").textContent.startsWith(`+jsString(who)+`)`),
	)
}

// q selects the first element matching a CSS selector.
func q(css string) chromedp.JSPath {
	return chromedp.JSPath("document.querySelector(" + jsString(css) + ")")
}

func jsString(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}

// lineJS finds a log line with exactly this text.
func lineJS(text string) string {
	return `[...document.querySelectorAll("#log li")].some(li => li.textContent === ` + jsString(text) + `)`
}

// Sign in, request a run through the form generated from the job's schema
// (an invalid value is flagged inline before anything is sent), and watch
// the real worker's log lines arrive while the run is still going.
func TestBrowserRequestRunWatchLog(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	b := newBrowser(t, e)
	e.startWorker()
	tab := b.tab("alice")
	b.signIn(tab, e.tokens["alice"], "alice")

	b.do(tab,
		chromedp.Navigate(b.base+"/request?channel=prod&job=greet"),
		chromedp.WaitVisible(q("#p-who")),
		chromedp.SendKeys(q("#p-who"), "Bad1"),
		waitJS(`document.querySelector("#p-who-err").textContent.includes("Must match")`),
		chromedp.Click(q("#submit-request")),
	)
	b.requireLabelled(tab)
	// The invalid form was not sent: still on the form, no run exists.
	require.True(t, b.eval(tab, `location.pathname === "/request" && document.querySelector("#p-who").getAttribute("aria-invalid") === "true"`))
	runs, _, err := e.svc.ListRuns(context.Background(), e.admin, store.RunListParams{})
	require.NoError(t, err)
	require.Empty(t, runs)
	// Defaults from the schema are filled in; the enum is a select.
	require.True(t, b.eval(tab, `document.querySelector("#p-times").value === "1" && document.querySelector("select#p-tone").value === "calm"`))

	b.do(tab,
		chromedp.Evaluate[chromedp.Void](`document.querySelector("#p-who").value = ""`),
		chromedp.SendKeys(q("#p-who"), "web"),
		waitJS(`document.querySelector("#p-who-err").textContent === ""`),
		chromedp.SendKeys(q("#reason"), "browser test"),
		chromedp.Click(q("#submit-request")),
		waitJS(`location.pathname.startsWith("/runs/run_")`),
		waitJS(lineJS("hello web")),
		waitJS(`[...document.querySelectorAll("#log li.stderr")].some(li => li.textContent === "to stderr")`),
	)
	// The log line with markup is shown as text: no element was made of it.
	require.True(t, b.eval(tab, lineJS(`<script>document.title="pwned"</script><img src=x onerror=alert(1)>`)))
	require.True(t, b.eval(tab, `document.querySelectorAll("#log script, #log img").length === 0 && document.title !== "pwned"`))
	// The job waits for its gate, so the run is live and the last line is
	// not there yet.
	require.False(t, b.eval(tab, lineJS("finished web")))
	require.True(t, b.eval(tab, `document.querySelector("#run-params").textContent.includes('"who": "web"') && document.querySelector("#run-actor").textContent === "alice"`))

	// The connection drops and comes back: the page resumes after its last
	// line.
	b.do(tab, chromedp.Evaluate[chromedp.Void](`document.querySelector("#log").reconnectLog()`),
		waitJS(`document.querySelector("#log-status").textContent === "live"`))

	// A second tab shows the runs list; its row turns from running to
	// succeeded without a reload.
	runID, err := chromedp.Run(tab, chromedp.Evaluate[string](`location.pathname.split("/")[2]`))
	require.NoError(t, err)
	list, cancelList := chromedp.NewContext(tab)
	defer cancelList()
	row := `document.querySelector('#run-rows tr[data-run="` + runID + `"] .state')`
	b.do(list,
		chromedp.Navigate(b.base+"/runs"),
		waitJS(row+` && `+row+`.textContent === "running"`),
		chromedp.Evaluate[chromedp.Void](`window.sameDocument = true`),
	)

	e.open("greet")
	b.do(list, waitJS(row+` && `+row+`.textContent === "succeeded" && window.sameDocument === true`))
	b.do(tab,
		waitJS(lineJS("finished web")),
		waitJS(`document.querySelector("#log").dataset.ended === "true"`),
		waitJS(`document.querySelector("#run-state").textContent === "succeeded"`),
		waitJS(`document.querySelector("#timeline").textContent.includes("claimed") && document.querySelector("#timeline").textContent.includes("attempt 1 succeeded")`),
		// The artifacts, with their digests and download links.
		waitJS(`document.querySelector('#artifacts a[href$="/artifacts/report.txt"]') && /^[0-9a-f]{64}$/.test(document.querySelector("#artifacts code.digest").textContent)`),
	)
	// Every line once, in order, across the reconnect.
	require.True(t, b.eval(tab, `(() => { const ids = [...document.querySelectorAll("#log li")].map(li => +li.dataset.id);
		return ids.length >= 5 && ids.every((id, i) => i === 0 || id > ids[i-1]); })()`))
	require.True(t, b.eval(tab, `[...document.querySelectorAll("#log li")].filter(li => li.textContent === "hello web").length === 1`))
}

// A run that needs a lead's approval: the requester sees why they cannot
// approve; a lead approves it from the inbox, on a phone-sized screen.
func TestBrowserApproveAsSecondUser(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	b := newBrowser(t, e)
	ctx := context.Background()
	v, _, err := e.svc.RequestRun(ctx, e.actor("alice"), &protocol.RunRequest{Job: "deploy", Channel: "prod", Reason: "release 1.0"})
	require.NoError(t, err)
	id := v.Run.ID

	alice := b.tab("alice")
	b.signIn(alice, e.tokens["alice"], "alice")
	b.do(alice,
		chromedp.Navigate(b.base+"/runs/"+id),
		chromedp.WaitVisible(q("#approve-note")),
	)
	require.True(t, b.eval(alice, `document.querySelector("#approve") === null && document.querySelector("#approve-note").textContent.includes("You requested")`))
	b.do(alice, chromedp.Navigate(b.base+"/approvals"), chromedp.WaitVisible(q("main h1")))
	b.requireLabelled(alice)
	require.True(t, b.eval(alice, `document.querySelector('[data-run="`+id+`"]') === null`))
	// The keyboard reaches the skip link first.
	b.do(alice, chromedp.Navigate(b.base+"/runs"), chromedp.WaitVisible(q("#run-rows")), chromedp.KeyEvent("\t"))
	require.True(t, b.eval(alice, `document.activeElement.classList.contains("skip")`))
	b.requireLabelled(alice)

	bob := b.tab("bob")
	b.do(bob, chromedp.EmulateViewport(375, 740))
	b.signIn(bob, e.tokens["bob"], "bob")
	sel := `section[data-run="` + id + `"]`
	b.do(bob,
		chromedp.Navigate(b.base+"/approvals"),
		chromedp.WaitVisible(q(sel)),
	)
	require.True(t, b.eval(bob, `document.querySelector('`+sel+`').textContent.includes("alice") && document.querySelector('`+sel+`').textContent.includes("deploy-needs-a-lead")`))
	require.True(t, b.eval(bob, `document.documentElement.scrollWidth <= window.innerWidth`), "no sideways scrolling at phone width")
	b.requireLabelled(bob)
	b.do(bob,
		chromedp.SendKeys(q(sel+` input[name=comment]`), "ship it"),
		chromedp.Click(q(sel+` button:not(.danger)`)),
		waitJS(`location.search.includes("notice=approved")`),
	)
	r, err := e.svc.GetRun(ctx, e.admin, id)
	require.NoError(t, err)
	require.Equal(t, store.RunQueued, r.Run.State)
	require.Len(t, r.Approvals, 1)
	require.Equal(t, "bob", r.Approvals[0].Approver)
	require.Equal(t, "ship it", r.Approvals[0].Comment)
	b.do(bob,
		chromedp.Navigate(b.base+"/runs/"+id),
		waitJS(`document.querySelector("#approvals").textContent.includes("approved by bob")`),
	)
}

// An admin sees a lease's holder (with runner, fencing token and a live
// countdown) and its waiting run, releases it break-glass with a reason,
// and reads the run's audit trail.
func TestBrowserLeaseBreakGlassAndAudit(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	b := newBrowser(t, e)
	e.startWorker()
	t.Cleanup(func() { e.open("migrate") })
	ctx := context.Background()
	first, _, err := e.svc.RequestRun(ctx, e.admin, &protocol.RunRequest{Job: "migrate", Channel: "prod"})
	require.NoError(t, err)
	second, _, err := e.svc.RequestRun(ctx, e.admin, &protocol.RunRequest{Job: "migrate", Channel: "prod"})
	require.NoError(t, err)

	admin := b.tab("admin")
	b.signIn(admin, adminToken, "admin")
	// Both runs were requested in the same instant, so either may be the
	// one the worker claimed first: the other waits for the key.
	shows := func(h, w string) string {
		return `[...document.querySelectorAll("section.lease tr.holder")].some(tr => tr.textContent.includes("` + h + `")) && ` +
			`[...document.querySelectorAll("section.lease li.waiter")].some(li => li.textContent.includes("` + w + `"))`
	}
	either := "(" + shows(first.Run.ID, second.Run.ID) + ") || (" + shows(second.Run.ID, first.Run.ID) + ")"
	// The page shows what the store says when it is loaded; reload until the
	// worker has claimed one run and tried the other.
	b.do(admin, chromedp.Navigate(b.base+"/leases"))
	for deadline := time.Now().Add(30 * time.Second); !b.eval(admin, either); {
		require.True(t, time.Now().Before(deadline), "the lease page never showed the holder and its waiter")
		b.do(admin, chromedp.Reload(), chromedp.WaitVisible(q("main h1")))
	}
	lv, err := e.svc.Leases().Show(ctx, e.admin, "db:prod")
	require.NoError(t, err)
	require.Len(t, lv.Holders, 1)
	held := lv.Holders[0].RunID
	b.requireLabelled(admin)
	b.do(admin, waitJS(`/^(\d+m )?\d+s$/.test(document.querySelector("section.lease time.countdown").textContent)`))
	require.True(t, b.eval(admin, `document.querySelector("section.lease td.fencing").textContent === "1" && document.querySelector("section.lease").textContent.includes("rnr_")`))

	// The reason is required: the browser does not send the form without it.
	b.do(admin, chromedp.Click(q("form.breakglass button")))
	require.True(t, b.eval(admin, `document.querySelector("form.breakglass input[name=reason]").validity.valueMissing && !location.search.includes("notice")`))
	b.do(admin,
		chromedp.SendKeys(q("form.breakglass input[name=reason]"), "stuck migration"),
		chromedp.Click(q("form.breakglass button")),
		waitJS(`location.search.includes("notice=released")`),
	)

	b.do(admin,
		chromedp.Navigate(b.base+"/audit?run="+held),
		chromedp.WaitVisible(q("table.audit")),
		waitJS(`document.querySelector("#chain-verdict") && document.querySelector("#chain-verdict").textContent === "Chain verified"`),
	)
	for _, action := range []string{"run.requested", "attempt.claimed", "lease.acquired"} {
		require.True(t, b.eval(admin, `document.querySelector("table.audit").textContent.includes("`+action+`")`), action)
	}
	b.do(admin,
		chromedp.Navigate(b.base+"/audit?action=lease.force_released"),
		chromedp.WaitVisible(q("table.audit")),
	)
	require.True(t, b.eval(admin, `document.querySelector("table.audit").textContent.includes("stuck migration") && document.querySelector("table.audit").textContent.includes("admin")`))
	require.False(t, b.eval(admin, `document.querySelector("table.audit").textContent.includes("run.requested")`), "the action filter applies")
}

// The run page's header (state, duration, actor, cancel) stays in view as
// the page scrolls, on a phone-sized screen, and after it refreshes
// itself, and a live run's log starts above the fold on a desktop screen; a control without the sticky rule scrolls away, so the check can
// fail.
func TestBrowserRunHeadStaysInView(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	b := newBrowser(t, e)
	v, _, err := e.svc.RequestRun(context.Background(), e.actor("alice"), &protocol.RunRequest{Job: "rotate", Channel: "prod", Reason: "sticky"})
	require.NoError(t, err)

	tab := b.tab("alice")
	b.signIn(tab, e.tokens["alice"], "alice")
	// On a desktop screen the live run's log starts above the fold.
	b.do(tab,
		chromedp.Navigate(b.base+"/runs/"+v.Run.ID),
		chromedp.WaitVisible(q("#head-cancel")),
	)
	require.True(t, b.eval(tab, `window.scrollY === 0 && document.querySelector("#log").getBoundingClientRect().top < window.innerHeight`), "the log is above the fold")

	b.do(tab, chromedp.EmulateViewport(375, 600))
	b.do(tab,
		chromedp.Navigate(b.base+"/runs/"+v.Run.ID),
		chromedp.WaitVisible(q("#head-cancel")),
	)
	require.True(t, b.eval(tab, `document.documentElement.scrollHeight > 2 * window.innerHeight`), "the page is long enough to scroll past its header")
	inView := `(() => { const h = document.querySelector("#run-head").getBoundingClientRect();
		const c = document.querySelector("#head-cancel").getBoundingClientRect();
		const s = document.querySelector("#head-state").getBoundingClientRect();
		const top = document.elementFromPoint(s.left + s.width / 2, s.top + s.height / 2);
		return h.top >= 0 && h.top < 2 && h.bottom <= window.innerHeight && c.top >= 0 && c.bottom <= window.innerHeight &&
			top !== null && document.querySelector("#run-head").contains(top); })()`
	scroll := func(y string) {
		b.do(tab, chromedp.Evaluate[chromedp.Void](`window.scrollTo(0, `+y+`)`), waitJS(`window.scrollY > 0`))
	}
	scroll(`document.documentElement.scrollHeight`)
	require.True(t, b.eval(tab, inView), "scrolled to the bottom, the header is in view and on top")
	scroll(`window.innerHeight`)
	require.True(t, b.eval(tab, inView), "half-way down, the header is in view")

	// The header replaces itself every 2 s while the run is live.
	b.do(tab, chromedp.Evaluate[chromedp.Void](`document.querySelector("#run-head").dataset.old = "1"`),
		waitJS(`document.querySelector("#run-head") && !document.querySelector("#run-head").dataset.old`))
	require.True(t, b.eval(tab, inView), "refreshed, the header is still in view")

	b.do(tab, chromedp.Evaluate[chromedp.Void](`document.querySelector("#run-head").style.position = "static"`))
	require.False(t, b.eval(tab, inView), "without position: sticky the header scrolls away")
}
