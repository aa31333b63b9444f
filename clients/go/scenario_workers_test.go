// The scenario runner's worker steps (clients/scenarios/README.md, "Worker
// steps"): worker processes of this client's scenario worker program
// (examples/scenarioworker, built once per test binary), which a scenario
// starts, kills and waits for; a signal sent through the peer, the worker
// program of another language named by STEPWELL_SCENARIO_PEER; and the
// count of the effects the workers ran.

package stepwell_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// scenarioSignal is a signal step's wait and payload.
type scenarioSignal struct {
	Run     string `json:"run"`
	Name    string `json:"name"`
	Payload string `json:"payload"`
}

// workerProc is a running worker process: its stdout lines arrive on lines
// (closed at EOF), and exited is closed once the process has been waited
// for.
type workerProc struct {
	cmd    *exec.Cmd
	lines  chan string
	seen   []string // the lines read from lines so far, by the runner
	stderr *lockedBuffer
	exited chan struct{}
}

// lockedBuffer is the stderr of a process, written by exec's copying
// goroutine and read by the runner.
type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

var (
	workerBuild    sync.Once
	workerBinary   string
	workerBuildErr error
)

// scenarioWorker builds examples/scenarioworker once per test binary and
// returns its path.
func scenarioWorker() (string, error) {
	workerBuild.Do(func() {
		workerBinary = filepath.Join(tmpDir, "scenarioworker")
		out, err := exec.Command("go", "build", "-o", workerBinary, "./examples/scenarioworker").CombinedOutput()
		if err != nil {
			workerBuildErr = &buildError{err: err, out: string(out)}
		}
	})
	return workerBinary, workerBuildErr
}

type buildError struct {
	err error
	out string
}

func (e *buildError) Error() string {
	return "go build ./examples/scenarioworker: " + e.err.Error() + "\n" + e.out
}

// sidecarTarget is the host:port the scenario's workers and peer reach its
// sidecar at.
func (r *scenarioRun) sidecarTarget() string {
	if r.sidecar != nil {
		return r.sidecar.target
	}
	return target
}

func (r *scenarioRun) workerStep(i int, st scenarioStep) {
	t := r.t
	t.Helper()
	timeout := time.Duration(st.TimeoutMs) * time.Millisecond
	if timeout == 0 {
		timeout = 5 * time.Second
	}
	p := r.procs[st.Worker]
	if st.Start == "" && p == nil {
		t.Fatalf("step %d: worker %s was never started", i, st.Worker)
	}
	switch {
	case st.Start != "":
		if p != nil {
			t.Fatalf("step %d: worker %s is started already", i, st.Worker)
		}
		r.procs[st.Worker] = r.startWorker(i, st)
	case st.Kill:
		if err := p.cmd.Process.Signal(syscall.SIGKILL); err != nil {
			t.Fatalf("step %d: kill worker %s: %v", i, st.Worker, err)
		}
		if !p.waitExit(timeout + 30*time.Second) {
			t.Fatalf("step %d: worker %s did not exit after SIGKILL", i, st.Worker)
		}
	case st.Exit != nil:
		if !p.waitExit(timeout) {
			t.Fatalf("step %d: worker %s did not exit within %v (lines %q, stderr %s)", i, st.Worker, timeout, p.seen, p.stderr)
		}
		if code := p.cmd.ProcessState.ExitCode(); code != *st.Exit {
			t.Fatalf("step %d: worker %s exited %d, want %d (lines %q, stderr %s)", i, st.Worker, code, *st.Exit, p.seen, p.stderr)
		}
		if st.Line != "" && !slices.Contains(p.seen, st.Line) {
			t.Fatalf("step %d: worker %s exited without printing %q (lines %q)", i, st.Worker, st.Line, p.seen)
		}
	case st.Line != "":
		if msg := p.waitLine(st.Line, timeout); msg != "" {
			t.Fatalf("step %d: worker %s: %s (lines %q, stderr %s)", i, st.Worker, msg, p.seen, p.stderr)
		}
	default:
		t.Fatalf("step %d: a worker step needs start, line, kill or exit", i)
	}
}

// startWorker starts this client's worker program for the step's run, on
// the scenario's sidecar and namespace, with the run's effects file.
func (r *scenarioRun) startWorker(i int, st scenarioStep) *workerProc {
	t := r.t
	t.Helper()
	bin, err := scenarioWorker()
	if err != nil {
		t.Fatalf("step %d: %v", i, err)
	}
	args := []string{st.Start, "--target", r.sidecarTarget(), "--namespace", r.ns, "--run", st.Run, "--effects", r.effects}
	if st.Start == "sleep" {
		args = append(args, "--seconds", strconv.FormatFloat(st.Seconds, 'f', -1, 64))
	}
	p := &workerProc{cmd: exec.Command(bin, args...), lines: make(chan string, 1024), stderr: &lockedBuffer{}, exited: make(chan struct{})}
	p.cmd.Stderr = p.stderr
	out, err := p.cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := p.cmd.Start(); err != nil {
		t.Fatalf("step %d: start worker %s: %v", i, st.Worker, err)
	}
	go func() {
		// Every line is read before Wait, as exec requires of a pipe.
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			p.lines <- sc.Text()
		}
		close(p.lines)
		_ = p.cmd.Wait()
		close(p.exited)
	}()
	t.Cleanup(func() {
		_ = p.cmd.Process.Kill()
		<-p.exited
	})
	return p
}

// waitLine reads the worker's lines until it prints want; it returns why
// it did not ("" when it did).
func (p *workerProc) waitLine(want string, timeout time.Duration) string {
	if slices.Contains(p.seen, want) {
		return ""
	}
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	for {
		select {
		case line, ok := <-p.lines:
			if !ok {
				<-p.exited
				return "exited (" + p.cmd.ProcessState.String() + ") before printing " + strconv.Quote(want)
			}
			p.seen = append(p.seen, line)
			if line == want {
				return ""
			}
		case <-deadline.C:
			return "did not print " + strconv.Quote(want) + " within " + timeout.String()
		}
	}
}

// waitExit waits, at most timeout, for the worker to exit, keeping the
// lines it printed; it reports whether it exited.
func (p *workerProc) waitExit(timeout time.Duration) bool {
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	for {
		select {
		case line, ok := <-p.lines:
			if !ok {
				<-p.exited
				return true
			}
			p.seen = append(p.seen, line)
		case <-deadline.C:
			return false
		}
	}
}

// peerSignal signals through the peer: STEPWELL_SCENARIO_PEER is its
// command line (split on white space), to which the runner appends
// "signal --target ...", and the step's expect is the line it prints.
func (r *scenarioRun) peerSignal(i int, st scenarioStep) {
	t := r.t
	t.Helper()
	peer := strings.Fields(os.Getenv("STEPWELL_SCENARIO_PEER"))
	if len(peer) == 0 {
		t.Fatalf("step %d: STEPWELL_SCENARIO_PEER is not set: it names the scenario worker of another language "+
			"(./test sets it to the Python one), through which this step signals", i)
	}
	var want string
	if err := json.Unmarshal(st.Expect, &want); err != nil {
		t.Fatalf("step %d: a signal step's expect is the line the peer prints: %v", i, err)
	}
	args := append(peer[1:], "signal", "--target", r.sidecarTarget(), "--namespace", r.ns,
		"--run", st.Signal.Run, "--name", st.Signal.Name, "--payload", st.Signal.Payload)
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, peer[0], args...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("step %d: peer %q: %v (stdout %q, stderr %s)", i, peer, err, out, stderr.String())
	}
	if got := strings.TrimSpace(string(out)); got != want {
		t.Fatalf("step %d: peer printed %q, want %q (stderr %s)", i, got, want, stderr.String())
	}
}

// checkEffects checks that the run's effects file holds exactly want lines.
func (r *scenarioRun) checkEffects(i, want int) {
	t := r.t
	t.Helper()
	raw, err := os.ReadFile(r.effects)
	if err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSuffix(string(raw), "\n"), "\n")
	if len(raw) == 0 {
		lines = nil
	}
	if len(lines) != want {
		t.Fatalf("step %d: the effects file holds %d lines, want %d: %q", i, len(lines), want, lines)
	}
}
