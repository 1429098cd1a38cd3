package worker

import (
	"errors"
	"os"
	"os/exec"
	"sync"
	"syscall"
	"time"
)

// process is a job's child process, leader of its own process group so that
// a stop reaches everything it spawned.
type process struct {
	cmd  *exec.Cmd
	pgid int

	mu     sync.Mutex
	exited bool
	timer  *time.Timer
}

// startProcess starts argv in dir with env; stdout and stderr go to the
// given pipe ends, which the caller closes after the start.
func startProcess(argv []string, dir string, env []string, stdout, stderr *os.File) (*process, error) {
	if len(argv) == 0 || argv[0] == "" {
		return nil, errors.New("job has no command")
	}
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Dir = dir
	cmd.Env = env
	cmd.Stdin = nil // /dev/null
	cmd.Stdout = stdout
	cmd.Stderr = stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	return &process{cmd: cmd, pgid: cmd.Process.Pid}, nil
}

// signal sends sig to the whole group, unless the group is known gone (its
// ID could otherwise be reused by an unrelated process).
func (p *process) signal(sig syscall.Signal) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.exited {
		_ = syscall.Kill(-p.pgid, sig)
	}
}

// terminate sends SIGTERM now and SIGKILL after grace, or SIGKILL at once
// when grace is not positive.
func (p *process) terminate(grace time.Duration) {
	if grace <= 0 {
		p.signal(syscall.SIGKILL)
		return
	}
	p.signal(syscall.SIGTERM)
	p.mu.Lock()
	if p.timer == nil && !p.exited {
		p.timer = time.AfterFunc(grace, func() { p.signal(syscall.SIGKILL) })
	}
	p.mu.Unlock()
}

// wait waits for the leader, then kills what is left of its group: nothing
// the job started may outlive the attempt, since the lease ends with it.
func (p *process) wait() error {
	err := p.cmd.Wait()
	p.mu.Lock()
	defer p.mu.Unlock()
	_ = syscall.Kill(-p.pgid, syscall.SIGKILL)
	p.exited = true
	if p.timer != nil {
		p.timer.Stop()
	}
	return err
}
