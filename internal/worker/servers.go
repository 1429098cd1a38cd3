package worker

import (
	"context"
	"net"
	"net/http"
	"net/url"
	"time"

	"github.com/jobplane/jobplane/internal/apiclient"
	"github.com/jobplane/jobplane/internal/tracing"
)

// lookupHost resolves a server's host name; tests replace it.
var lookupHost = net.DefaultResolver.LookupHost

// withTracing returns a copy of hc whose requests carry the attempt's
// trace, so that the server's spans of them join the run's trace.
func withTracing(hc *http.Client) *http.Client {
	c := http.Client{Timeout: apiclient.DefaultTimeout}
	if hc != nil {
		c = *hc
	}
	c.Transport = tracing.Transport(c.Transport)
	return &c
}

// resolveServers makes a server whose host name resolves to several
// addresses one server per address, so that failover reaches each replica
// behind the name (a DNS name listing every replica, or a headless
// Kubernetes Service). The name is resolved once, at start; a name that
// does not resolve yet is kept as it is, and dialled by name.
func (w *Worker) resolveServers(ctx context.Context) {
	var out []apiclient.Server
	expanded := false
	for _, raw := range w.cfg.serverURLs() {
		u, err := url.Parse(raw)
		if err != nil || net.ParseIP(u.Hostname()) != nil {
			out = append(out, apiclient.Server{URL: raw})
			continue
		}
		lctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		addrs, err := lookupHost(lctx, u.Hostname())
		cancel()
		base, ok := w.baseTransport()
		if err != nil || len(addrs) < 2 || !ok {
			if err != nil {
				w.log.Warn("worker: cannot resolve the server's name; dialling it by name", "server", raw, "error", err)
			}
			out = append(out, apiclient.Server{URL: raw})
			continue
		}
		port := u.Port()
		if port == "" {
			port = map[string]string{"http": "80", "https": "443"}[u.Scheme]
		}
		for _, addr := range addrs {
			out = append(out, apiclient.Server{URL: raw, HTTP: w.dialling(base, net.JoinHostPort(addr, port))})
		}
		expanded = true
		w.log.Info("worker: server name resolves to several replicas; failing over among them", "server", raw, "addresses", addrs)
	}
	if expanded || len(out) > 1 {
		w.rc.Servers = out
	}
}

// baseTransport is the transport to copy for a client that dials one
// address: the configured client's, when it is an *http.Transport.
func (w *Worker) baseTransport() (*http.Transport, bool) {
	if w.cfg.HTTP == nil || w.cfg.HTTP.Transport == nil {
		return http.DefaultTransport.(*http.Transport), true
	}
	t, ok := w.cfg.HTTP.Transport.(*http.Transport)
	return t, ok
}

// dialling returns an HTTP client like the configured one whose
// connections all go to addr, whatever the URL's host says; TLS and the
// Host header keep the URL's name.
func (w *Worker) dialling(base *http.Transport, addr string) *http.Client {
	t := base.Clone()
	dial := t.DialContext
	if dial == nil {
		dial = (&net.Dialer{Timeout: 30 * time.Second, KeepAlive: 30 * time.Second}).DialContext
	}
	t.DialContext = func(ctx context.Context, network, _ string) (net.Conn, error) {
		return dial(ctx, network, addr)
	}
	c := &http.Client{Timeout: apiclient.DefaultTimeout, Transport: t}
	if w.cfg.HTTP != nil {
		c.Timeout = w.cfg.HTTP.Timeout
	}
	if w.cfg.Tracing.Enabled() {
		c = withTracing(c)
	}
	return c
}
