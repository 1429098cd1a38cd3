// Package web is the operator UI that `jobplane server` serves at /: runs
// with their live logs, approvals, leases, the catalog, runners and the
// audit log. Pages are rendered on the server with html/template from files
// embedded in the binary; the only scripts are a vendored htmx (for
// polling fragments) and a small app.js (live log, countdowns, inline form
// validation), both served from the binary, so nothing outside the machine
// is fetched.
//
// A principal signs in with an API token, which is kept in an HttpOnly,
// SameSite=Strict cookie. Every form carries a CSRF token derived from the
// session token, and every action calls the same control.Service methods,
// with the same actor and therefore the same policy, as the HTTP API.
package web
