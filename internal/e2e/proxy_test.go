package e2e

import (
	"net"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"
)

// faultProxy forwards TCP connections to a target until partitioned: then
// no byte gets through in either direction, new connections are accepted
// and left silent, and at heal every connection that saw the partition is
// closed (as one would be after a long partition), new ones work again.
type faultProxy struct {
	ln     net.Listener
	target string

	mu     sync.Mutex
	healed chan struct{} // nil while connected; closed at heal
	conns  map[net.Conn]struct{}
}

func newFaultProxy(t *testing.T, target string) *faultProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	p := &faultProxy{ln: ln, target: target, conns: map[net.Conn]struct{}{}}
	go p.serve()
	t.Cleanup(func() {
		ln.Close()
		p.heal()
		p.mu.Lock()
		for c := range p.conns {
			c.Close()
		}
		p.mu.Unlock()
	})
	return p
}

func (p *faultProxy) url() string { return "http://" + p.ln.Addr().String() }

// partition stops all traffic until heal.
func (p *faultProxy) partition() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.healed == nil {
		p.healed = make(chan struct{})
	}
}

func (p *faultProxy) heal() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.healed != nil {
		close(p.healed)
		p.healed = nil
	}
}

// blocked returns the heal channel while partitioned, else nil.
func (p *faultProxy) blocked() chan struct{} {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.healed
}

func (p *faultProxy) track(c net.Conn, add bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if add {
		p.conns[c] = struct{}{}
	} else {
		delete(p.conns, c)
	}
}

func (p *faultProxy) serve() {
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		go p.handle(c)
	}
}

func (p *faultProxy) handle(c net.Conn) {
	p.track(c, true)
	defer func() { p.track(c, false); c.Close() }()
	if h := p.blocked(); h != nil {
		<-h
		return
	}
	up, err := net.Dial("tcp", p.target)
	if err != nil {
		return
	}
	p.track(up, true)
	defer func() { p.track(up, false); up.Close() }()
	done := make(chan struct{}, 2)
	go func() { p.pipe(up, c); done <- struct{}{} }()
	go func() { p.pipe(c, up); done <- struct{}{} }()
	<-done
}

// pipe copies src to dst; data read during a partition is dropped and the
// connection dies at heal.
func (p *faultProxy) pipe(dst, src net.Conn) {
	defer func() { dst.Close(); src.Close() }()
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			if h := p.blocked(); h != nil {
				<-h
				return
			}
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}
