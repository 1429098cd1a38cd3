package protocol

import "net/http"

// CodeCSRFInvalid refuses a web form whose CSRF token is missing or wrong,
// or that another site posted.
const CodeCSRFInvalid = "csrf_invalid"

// ErrCSRF is the web UI's refusal of a forged or stale form.
var ErrCSRF = newErr(http.StatusForbidden, CodeCSRFInvalid, "Form expired or forged")
