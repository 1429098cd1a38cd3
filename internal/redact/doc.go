// Package redact scrubs secret values out of text: a Masker replaces each
// value, and its base64 encodings, with "***" in log lines and error
// messages. It is a leaf: the worker masks a job's output with it without
// importing the server's credential code.
package redact
