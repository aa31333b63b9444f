// Tests of the Client, Once and StoreCheckpoint against a real sidecar.

package stepwell_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc/codes"

	stepwell "stepwell.dev/client"
	pb "stepwell.dev/client/gen/stepwell/v1"
)

var ctx = context.Background()

func TestClientMethods(t *testing.T) {
	ns := freshNS(t, "methods")
	c := dial(t, stepwell.WithNamespace(ns))
	ts := time.Date(2026, 1, 1, 0, 0, 0, 1, time.UTC)
	r, err := c.Checkpoint(ctx, &pb.CheckpointRequest{TurnId: "t", Phase: "started", State: []byte(`{"a":1}`), Timestamp: stepwell.Timestamp(ts), WorkflowVersion: "1.0.0"})
	if err != nil || !r.GetInserted() || r.GetCheckpoint().GetNamespace() != ns {
		t.Fatalf("Checkpoint: %v %v", r, err)
	}
	_, err = c.Checkpoint(ctx, &pb.CheckpointRequest{TurnId: "t", Phase: "started", State: []byte(`{"a":2}`), Timestamp: stepwell.Timestamp(ts)})
	if !errors.Is(err, stepwell.ErrCheckpointConflict) {
		t.Fatalf("want ErrCheckpointConflict, got %v", err)
	}
	var se *stepwell.Error
	if !errors.As(err, &se) || se.Code != codes.AlreadyExists {
		t.Fatalf("errors.As: %v", err)
	}
	for i := 1; i <= 3; i++ {
		if _, err := c.Checkpoint(ctx, &pb.CheckpointRequest{TurnId: "t", Phase: "step", State: []byte(`{}`), Timestamp: stepwell.Timestamp(ts.Add(time.Duration(i) * time.Second)), Terminal: i == 3}); err != nil {
			t.Fatal(err)
		}
	}
	rr, err := c.Restore(ctx, &pb.RestoreRequest{TurnId: "t", PageSize: 1, NewestFirst: true})
	if err != nil || len(rr.GetCheckpoints()) != 1 || !rr.GetCheckpoints()[0].GetTerminal() {
		t.Fatalf("Restore: %v %v", rr, err)
	}
	all, err := c.RestoreAll(ctx, &pb.RestoreRequest{TurnId: "t", PageSize: 2})
	if err != nil || len(all) != 4 {
		t.Fatalf("RestoreAll: %d %v", len(all), err)
	}
	_, err = c.Restore(ctx, &pb.RestoreRequest{TurnId: "t", ExpectWorkflowVersion: "2.0.0"})
	if !errors.Is(err, stepwell.ErrWorkflowVersionMismatch) || !errors.As(err, &se) || len(se.Metadata) == 0 {
		t.Fatalf("want ErrWorkflowVersionMismatch with metadata, got %v", err)
	}
	lt, err := c.ListTurns(ctx, &pb.ListTurnsRequest{Status: pb.TurnStatus_TURN_STATUS_TERMINAL})
	if err != nil || len(lt.GetTurns()) != 1 || lt.GetTurns()[0].GetCheckpointCount() != 4 {
		t.Fatalf("ListTurns: %v %v", lt, err)
	}
	dt, err := c.DeleteTurn(ctx, &pb.DeleteTurnRequest{TurnId: "t"})
	if err != nil || dt.GetDeleted() != 4 {
		t.Fatalf("DeleteTurn: %v %v", dt, err)
	}
	_, err = c.Checkpoint(ctx, &pb.CheckpointRequest{TurnId: "t", Phase: "bad phase", State: []byte(`{}`), Timestamp: stepwell.Timestamp(ts)})
	if !errors.Is(err, stepwell.ErrInvalidArgument) || !errors.As(err, &se) || se.Field != "phase" {
		t.Fatalf("want ErrInvalidArgument on phase, got %v", err)
	}

	b, err := c.Begin(ctx, &pb.BeginRequest{Key: "k", Fingerprint: []byte("f"), Lease: stepwell.Duration(10 * time.Second)})
	if err != nil || b.GetOutcome() != pb.BeginOutcome_BEGIN_OUTCOME_ACQUIRED {
		t.Fatalf("Begin: %v %v", b, err)
	}
	if _, err := c.Begin(ctx, &pb.BeginRequest{Key: "k", Fingerprint: []byte("g")}); !errors.Is(err, stepwell.ErrKeyReused) {
		t.Fatalf("want ErrKeyReused, got %v", err)
	}
	if e, err := c.Extend(ctx, &pb.ExtendRequest{Key: "k", LeaseToken: b.GetLeaseToken(), Lease: stepwell.Duration(time.Minute)}); err != nil || e.GetLeaseExpiresAt() == nil {
		t.Fatalf("Extend: %v %v", e, err)
	}
	if _, err := c.Extend(ctx, &pb.ExtendRequest{Key: "k", LeaseToken: b.GetLeaseToken() + 100}); !errors.Is(err, stepwell.ErrLeaseLost) {
		t.Fatalf("want ErrLeaseLost, got %v", err)
	}
	if _, err := c.Complete(ctx, &pb.CompleteRequest{Key: "k", LeaseToken: b.GetLeaseToken(), Result: []byte("r")}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Complete(ctx, &pb.CompleteRequest{Key: "k", LeaseToken: b.GetLeaseToken(), Result: []byte("other")}); !errors.Is(err, stepwell.ErrResultMismatch) {
		t.Fatalf("want ErrResultMismatch, got %v", err)
	}
	if _, err := c.Release(ctx, &pb.ReleaseRequest{Key: "k", LeaseToken: b.GetLeaseToken()}); !errors.Is(err, stepwell.ErrNotAcquired) {
		t.Fatalf("want ErrNotAcquired, got %v", err)
	}
	g, err := c.Get(ctx, &pb.GetRequest{Key: "k"})
	if err != nil || g.GetState() != pb.RecordState_RECORD_STATE_COMPLETED || string(g.GetResult()) != "r" {
		t.Fatalf("Get: %v %v", g, err)
	}
	if _, err := c.Get(ctx, &pb.GetRequest{Key: "nope"}); !errors.Is(err, stepwell.ErrKeyNotFound) {
		t.Fatalf("want ErrKeyNotFound, got %v", err)
	}
	b2, _ := c.Begin(ctx, &pb.BeginRequest{Key: "k2"})
	rel, err := c.Release(ctx, &pb.ReleaseRequest{Key: "k2", LeaseToken: b2.GetLeaseToken(), Error: "x", Permanent: true})
	if err != nil || rel.GetState() != pb.RecordState_RECORD_STATE_FAILED {
		t.Fatalf("Release: %v %v", rel, err)
	}
}

func TestUnavailableRetriesAndDeadline(t *testing.T) {
	port, _ := freePort()
	c, err := stepwell.Dial(fmt.Sprintf("127.0.0.1:%d", port), stepwell.WithTimeout(2*time.Second), stepwell.WithRetry(3, 10*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_, err = c.Get(ctx, &pb.GetRequest{Key: "k"})
	if !errors.Is(err, stepwell.ErrUnavailable) {
		t.Fatalf("want ErrUnavailable, got %v", err)
	}
	// With retries enough for ten seconds, only the context's deadline can end the call.
	cctx, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	defer cancel()
	c2, _ := stepwell.Dial(fmt.Sprintf("127.0.0.1:%d", port), stepwell.WithRetry(1000, 10*time.Millisecond))
	defer c2.Close()
	_, err = c2.Get(cctx, &pb.GetRequest{Key: "k"})
	if err == nil || cctx.Err() == nil {
		t.Fatalf("context deadline not honoured: %v", err)
	}
}

func TestUnixSocket(t *testing.T) {
	dir, err := os.MkdirTemp("/tmp", "sw")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(dir)
	sock := filepath.Join(dir, "s.sock")
	cmd, err := startSidecar("unix:"+sock, "unix:"+sock, filepath.Join(dir, "u.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = cmd.Process.Kill(); _, _ = cmd.Process.Wait() }()
	c, err := stepwell.Dial("unix:"+sock, stepwell.WithNamespace("unix-test"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	got, err := stepwell.Once(ctx, c, "u/1", func(context.Context, stepwell.OnceInfo) (int, error) { return 42, nil })
	if err != nil || got != 42 {
		t.Fatalf("Once over unix socket: %v %v", got, err)
	}
}

func TestOnceConcurrent(t *testing.T) {
	c := dial(t, stepwell.WithNamespace(freshNS(t, "once")))
	var calls atomic.Int32
	var wg sync.WaitGroup
	results := make([]string, 20)
	errs := make([]error, 20)
	for i := range 20 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			results[i], errs[i] = stepwell.Once(ctx, c, stepwell.StepKey("run-1", "charge"), func(context.Context, stepwell.OnceInfo) (string, error) {
				calls.Add(1)
				time.Sleep(200 * time.Millisecond)
				return "receipt-1", nil
			}, stepwell.OnceOptions{Lease: time.Second})
		}()
	}
	wg.Wait()
	if n := calls.Load(); n != 1 {
		t.Fatalf("fn ran %d times", n)
	}
	for i := range 20 {
		if errs[i] != nil || results[i] != "receipt-1" {
			t.Fatalf("caller %d: %q %v", i, results[i], errs[i])
		}
	}
}

func TestOnceSemantics(t *testing.T) {
	c := dial(t, stepwell.WithNamespace(freshNS(t, "oncesem")))
	// fn error releases the key; the next call runs again (attempt 2).
	boom := errors.New("boom")
	_, err := stepwell.Once(ctx, c, "k", func(context.Context, stepwell.OnceInfo) (int, error) { return 0, boom })
	if !errors.Is(err, boom) {
		t.Fatalf("want fn's error, got %v", err)
	}
	v, err := stepwell.Once(ctx, c, "k", func(_ context.Context, info stepwell.OnceInfo) (int, error) {
		if info.Attempt != 2 || info.PreviousLeaseExpired {
			t.Errorf("info %+v", info)
		}
		return 7, nil
	})
	if err != nil || v != 7 {
		t.Fatal(v, err)
	}
	v, err = stepwell.Once(ctx, c, "k", func(context.Context, stepwell.OnceInfo) (int, error) {
		t.Error("fn called after COMPLETED")
		return 0, nil
	})
	if err != nil || v != 7 {
		t.Fatal(v, err)
	}
	// The lease is extended while fn runs longer than it.
	v, err = stepwell.Once(ctx, c, "long", func(context.Context, stepwell.OnceInfo) (int, error) {
		time.Sleep(700 * time.Millisecond)
		return 1, nil
	}, stepwell.OnceOptions{Lease: 300 * time.Millisecond})
	if err != nil || v != 1 {
		t.Fatalf("long fn: %v %v", v, err)
	}
	// An expired earlier holder reaches fn as PreviousLeaseExpired.
	if _, err := c.Begin(ctx, &pb.BeginRequest{Key: "crashed", Lease: stepwell.Duration(100 * time.Millisecond)}); err != nil {
		t.Fatal(err)
	}
	var prev bool
	_, err = stepwell.Once(ctx, c, "crashed", func(_ context.Context, info stepwell.OnceInfo) (bool, error) {
		prev = info.PreviousLeaseExpired
		return true, nil
	}, stepwell.OnceOptions{WaitTimeout: 5 * time.Second})
	if err != nil || !prev {
		t.Fatalf("PreviousLeaseExpired not reported: %v %v", prev, err)
	}
	// A held key times out; a permanently failed key reports ErrOperationFailed.
	if _, err := c.Begin(ctx, &pb.BeginRequest{Key: "held", Lease: stepwell.Duration(time.Minute)}); err != nil {
		t.Fatal(err)
	}
	_, err = stepwell.Once(ctx, c, "held", func(context.Context, stepwell.OnceInfo) (int, error) { return 0, nil }, stepwell.OnceOptions{WaitTimeout: 200 * time.Millisecond})
	if !errors.Is(err, stepwell.ErrOnceTimeout) {
		t.Fatalf("want ErrOnceTimeout, got %v", err)
	}
	b, _ := c.Begin(ctx, &pb.BeginRequest{Key: "failed"})
	_, _ = c.Release(ctx, &pb.ReleaseRequest{Key: "failed", LeaseToken: b.GetLeaseToken(), Error: "nope", Permanent: true})
	_, err = stepwell.Once(ctx, c, "failed", func(context.Context, stepwell.OnceInfo) (int, error) { return 0, nil })
	if !errors.Is(err, stepwell.ErrOperationFailed) {
		t.Fatalf("want ErrOperationFailed, got %v", err)
	}
}

func TestStoreCheckpoint(t *testing.T) {
	c := dial(t)
	flow := freshNS(t, "onboard")
	cp := stepwell.NewCheckpoint(c, flow)
	if _, ok, err := cp.Load(ctx, "r1"); ok || err != nil {
		t.Fatalf("Load of unknown run: %v %v", ok, err)
	}
	run := stepwell.Run{ID: "r1", Flow: flow, Status: "running", State: stepwell.State{Stage: "plan"}, Started: time.Now().UTC()}
	_ = run.State.Set(map[string]string{"email": "a@b"})
	for _, stage := range []string{"plan", "workspace", "welcome", ""} {
		run.State.Stage = stage
		if err := cp.Save(ctx, run); err != nil {
			t.Fatal(err)
		}
	}
	got, ok, err := cp.Load(ctx, "r1")
	if err != nil || !ok || got.State.Stage != "" || got.Status != "running" {
		t.Fatalf("Load newest: %+v %v %v", got, ok, err)
	}
	var data map[string]string
	if err := got.State.Scan(&data); err != nil || data["email"] != "a@b" {
		t.Fatalf("Scan: %v %v", data, err)
	}
	open, _ := cp.Runs(ctx, pb.TurnStatus_TURN_STATUS_OPEN)
	if len(open) != 1 {
		t.Fatalf("open runs: %v", open)
	}
	run.Status = "done"
	if err := cp.Save(ctx, run); err != nil {
		t.Fatal(err)
	}
	done, _ := cp.Runs(ctx, pb.TurnStatus_TURN_STATUS_TERMINAL)
	if len(done) != 1 || !done[0].GetTerminal() {
		t.Fatalf("terminal runs: %v", done)
	}
	hist, err := cp.History(ctx, "r1")
	if err != nil || len(hist) != 5 || hist[0].State.Stage != "plan" || hist[4].Status != "done" {
		t.Fatalf("History: %d %v", len(hist), err)
	}
	// Flow scoping: another flow sees nothing of this one.
	other := stepwell.NewCheckpoint(c, flow+"-other")
	if other.Namespace() == cp.Namespace() {
		t.Fatal("two flows share a namespace")
	}
	if _, ok, _ := other.Load(ctx, "r1"); ok {
		t.Fatal("run visible from another flow")
	}
	if err := cp.Delete(ctx, "r1"); err != nil {
		t.Fatal(err)
	}
	if _, ok, _ := cp.Load(ctx, "r1"); ok {
		t.Fatal("run still there after Delete")
	}
	for _, name := range []string{"Onboard User!", strings.Repeat("x", 100), "a/b"} {
		ns := stepwell.FlowNamespace(name)
		if len(ns) > 63 || strings.ToLower(ns) != ns || strings.ContainsAny(ns, " !/") {
			t.Fatalf("bad namespace %q for %q", ns, name)
		}
		if err := stepwell.NewCheckpoint(c, name).Save(ctx, stepwell.Run{ID: "x"}); err != nil {
			t.Fatalf("flow %q: %v", name, err)
		}
	}
}

func TestExampleFlowCrashAndResume(t *testing.T) {
	bin := filepath.Join(t.TempDir(), "flow")
	if out, err := exec.Command("go", "build", "-o", bin, "./examples/flow").CombinedOutput(); err != nil {
		t.Fatalf("build: %v\n%s", err, out)
	}
	flow := freshNS(t, "example")
	args := []string{"-target", target, "-run", "run-1", "-flow", flow}
	out, err := exec.Command(bin, append(args, "-crash-after", "workspace")...).CombinedOutput()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 137 {
		t.Fatalf("want exit 137, got %v\n%s", err, out)
	}
	s := string(out)
	if !strings.Contains(s, "step plan: effect ran") || !strings.Contains(s, "step workspace: effect ran") || strings.Contains(s, "welcome") {
		t.Fatalf("first run:\n%s", s)
	}
	out, err = exec.Command(bin, args...).CombinedOutput()
	if err != nil {
		t.Fatalf("resume: %v\n%s", err, out)
	}
	s = string(out)
	if !strings.Contains(s, "resuming at workspace") || strings.Contains(s, "step plan") ||
		!strings.Contains(s, "step workspace: effect already recorded") || !strings.Contains(s, "step welcome: effect ran") ||
		!strings.Contains(s, "run run-1 done") {
		t.Fatalf("resume:\n%s", s)
	}
	out, err = exec.Command(bin, args...).CombinedOutput()
	if err != nil || !strings.Contains(string(out), "already done") {
		t.Fatalf("third run: %v\n%s", err, out)
	}
}

// Six states of about 900 KB, 5.4 MB in all, more than the 4 MiB a gRPC
// client accepts in one message: the sidecar cuts each page to fit, and
// RestoreAll follows the pages with the default limits.
func TestRestoreAllOfATurnLargerThanAMessage(t *testing.T) {
	c := dial(t, stepwell.WithNamespace(freshNS(t, "big")))
	ts := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	states := make([][]byte, 6)
	for i := range states {
		states[i] = []byte(fmt.Sprintf(`"%d%s"`, i, strings.Repeat("x", 900_000)))
		req := &pb.CheckpointRequest{TurnId: "big", Phase: fmt.Sprintf("p%d", i), State: states[i], Timestamp: stepwell.Timestamp(ts.Add(time.Duration(i) * time.Second))}
		if _, err := c.Checkpoint(ctx, req); err != nil {
			t.Fatalf("Checkpoint %d: %v", i, err)
		}
	}
	first, err := c.Restore(ctx, &pb.RestoreRequest{TurnId: "big"})
	if err != nil || len(first.GetCheckpoints()) < 1 || len(first.GetCheckpoints()) >= 6 || first.GetNextPageToken() == "" {
		t.Fatalf("first page: %d checkpoints, token %q, %v", len(first.GetCheckpoints()), first.GetNextPageToken(), err)
	}
	all, err := c.RestoreAll(ctx, &pb.RestoreRequest{TurnId: "big"})
	if err != nil || len(all) != 6 {
		t.Fatalf("RestoreAll: %d %v", len(all), err)
	}
	for i, cp := range all {
		if cp.GetPhase() != fmt.Sprintf("p%d", i) || string(cp.GetState()) != string(states[i]) {
			t.Fatalf("checkpoint %d: phase %q, %d bytes of state", i, cp.GetPhase(), len(cp.GetState()))
		}
	}
}

// Two workers whose clocks are an hour apart take turns on one run: the
// newest save is what Load returns, whichever clock stamped it, with or
// without a Load before the save, and when a worker that saved the run
// before loads it again after others moved it on.
func TestStoreCheckpointOrderDoesNotDependOnClocks(t *testing.T) {
	c := dial(t)
	flow := freshNS(t, "skew")
	ahead := stepwell.NewCheckpoint(c, flow)
	behindClock := func() time.Time { return time.Now().Add(-time.Hour) }
	behind := stepwell.NewCheckpoint(c, flow).WithClock(behindClock)
	save := func(cp *stepwell.StoreCheckpoint, stage string) {
		t.Helper()
		if err := cp.Save(ctx, stepwell.Run{ID: "r", Status: "running", State: stepwell.State{Stage: stage}}); err != nil {
			t.Fatal(err)
		}
	}
	newest := func() string {
		t.Helper()
		run, ok, err := stepwell.NewCheckpoint(c, flow).Load(ctx, "r")
		if err != nil || !ok {
			t.Fatalf("Load: %v %v", ok, err)
		}
		return run.State.Stage
	}
	save(ahead, "one")
	if _, _, err := behind.Load(ctx, "r"); err != nil {
		t.Fatal(err)
	}
	save(behind, "two")
	if got := newest(); got != "two" {
		t.Fatalf("after the worker behind loaded and saved, Load returned %q", got)
	}
	save(ahead, "three")
	// A third worker, also an hour behind, saves without loading first.
	save(stepwell.NewCheckpoint(c, flow).WithClock(behindClock), "four")
	if got := newest(); got != "four" {
		t.Fatalf("after a save without a load, Load returned %q", got)
	}
	// The worker behind, which saved "two", resumes: it loads the newest
	// ("four", stamped from the clock ahead) and saves after it.
	if run, _, err := behind.Load(ctx, "r"); err != nil || run.State.Stage != "four" {
		t.Fatalf("Load: %q %v", run.State.Stage, err)
	}
	save(behind, "five")
	if got := newest(); got != "five" {
		t.Fatalf("after the worker behind loaded again and saved, Load returned %q", got)
	}
}
