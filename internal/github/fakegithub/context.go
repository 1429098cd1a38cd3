package fakegithub

import "context"

type entryKey struct{}

func withEntry(ctx context.Context, e *Request) context.Context {
	return context.WithValue(ctx, entryKey{}, e)
}

// entryOf returns the request's log entry, for the handlers to fill in the
// authentication they saw.
func entryOf(ctx context.Context) *Request {
	if e, ok := ctx.Value(entryKey{}).(*Request); ok {
		return e
	}
	return &Request{}
}
