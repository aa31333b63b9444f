// The flow engine's Checkpoint contract (the interface checkpoint.go
// declares and StoreCheckpoint implements), its statements about the
// adapter as tests, run by the test
// script's install check in a fresh module against the installed copy of the
// client and a sidecar the script started (STEPWELL_TEST_TARGET). The go
// tool skips testdata, so the client's own `go test ./...` never builds it.

package main

import (
	"context"
	"encoding/json"
	"os"
	"reflect"
	"testing"
	"time"

	stepwell "stepwell.dev/client"
)

// The adapter is the pluggable primitive: it satisfies the interface as declared.
var _ stepwell.Checkpoint = (*stepwell.StoreCheckpoint)(nil)

func dialInstalled(t *testing.T) *stepwell.Client {
	t.Helper()
	target := os.Getenv("STEPWELL_TEST_TARGET")
	if target == "" {
		t.Fatal("STEPWELL_TEST_TARGET must name the sidecar the install check started")
	}
	c, err := stepwell.Dial(target)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// flowName is a flow no other test or run of the check uses.
func flowName(t *testing.T) string {
	return "contract-" + t.Name() + "-" + time.Now().UTC().Format("150405.000000000")
}

type onboarding struct {
	Email       string `json:"email"`
	WorkspaceID string `json:"workspace_id"`
}

// aRun is a run in the middle of its steps, with every field of Run set.
func aRun(t *testing.T, id, flow, stage, status string) stepwell.Run {
	t.Helper()
	run := stepwell.Run{
		ID: id, Flow: flow, Status: status,
		State: stepwell.State{Stage: stage},
		Steps: []stepwell.StepRecord{
			{Name: "plan", Status: "done", Attempts: 1, Result: `{"plan":"ok"}`},
			{Name: "workspace", Status: "failed", Attempts: 3, Error: "quota exceeded"},
			{Name: "welcome", Status: "pending"},
		},
		Started: time.Date(2026, 5, 1, 10, 0, 0, 123456789, time.UTC),
		Updated: time.Date(2026, 5, 1, 10, 0, 7, 0, time.UTC),
	}
	if err := run.State.Set(onboarding{Email: "a@example.com", WorkspaceID: "w-" + stage}); err != nil {
		t.Fatal(err)
	}
	return run
}

func TestLoadOfAnUnknownRunIsTheZeroRunNotFoundNoError(t *testing.T) {
	cp := stepwell.NewCheckpoint(dialInstalled(t), flowName(t))
	run, ok, err := cp.Load(context.Background(), "never-saved")
	if err != nil || ok || !reflect.DeepEqual(run, stepwell.Run{}) {
		t.Fatalf("Load of an unknown run: (%+v, %v, %v), want (Run{}, false, nil)", run, ok, err)
	}
}

// Save persists the whole Run and Load restores it, field for field, from
// another StoreCheckpoint (a restarted process); each Save of a run ID
// replaces what Load returns with the latest Run.
func TestSaveThenLoadReturnsTheLatestRunWholeAcrossARestart(t *testing.T) {
	ctx := context.Background()
	c := dialInstalled(t)
	flow := flowName(t)
	cp := stepwell.NewCheckpoint(c, flow)
	var last stepwell.Run
	for _, stage := range []string{"plan", "workspace", "welcome"} {
		last = aRun(t, "run-1", flow, stage, "running")
		if err := cp.Save(ctx, last); err != nil {
			t.Fatal(err)
		}
	}
	got, ok, err := stepwell.NewCheckpoint(c, flow).Load(ctx, "run-1")
	if err != nil || !ok || !reflect.DeepEqual(got, last) {
		t.Fatalf("Load after a restart: (%+v, %v, %v), want the latest run %+v", got, ok, err, last)
	}
	// The resume point is State.Stage, and the data scans back into the caller's struct.
	var data onboarding
	if err := got.State.Scan(&data); err != nil || got.State.Stage != "welcome" || data.WorkspaceID != "w-welcome" {
		t.Fatalf("resume point %q, data %+v, %v", got.State.Stage, data, err)
	}
}

// Completed runs are kept, successes and failures alike: only Delete removes them.
func TestFinishedRunsAreKeptUntilDeleted(t *testing.T) {
	ctx := context.Background()
	flow := flowName(t)
	cp := stepwell.NewCheckpoint(dialInstalled(t), flow)
	for _, status := range []string{"done", "failed"} {
		run := aRun(t, "run-"+status, flow, "", status)
		if err := cp.Save(ctx, run); err != nil {
			t.Fatal(err)
		}
		got, ok, err := cp.Load(ctx, run.ID)
		if err != nil || !ok || !reflect.DeepEqual(got, run) {
			t.Fatalf("Load of a %s run: (%+v, %v, %v)", status, got, ok, err)
		}
	}
}

// Delete removes a run: Load then finds nothing, and the run ID starts over.
// Deleting a run that is not there is not an error. Other runs stay.
func TestDeleteThenLoadIsNotFound(t *testing.T) {
	ctx := context.Background()
	flow := flowName(t)
	cp := stepwell.NewCheckpoint(dialInstalled(t), flow)
	for _, id := range []string{"run-1", "run-2"} {
		if err := cp.Save(ctx, aRun(t, id, flow, "plan", "running")); err != nil {
			t.Fatal(err)
		}
	}
	if err := cp.Delete(ctx, "run-1"); err != nil {
		t.Fatal(err)
	}
	if run, ok, err := cp.Load(ctx, "run-1"); err != nil || ok || !reflect.DeepEqual(run, stepwell.Run{}) {
		t.Fatalf("Load after Delete: (%+v, %v, %v), want (Run{}, false, nil)", run, ok, err)
	}
	if err := cp.Delete(ctx, "run-1"); err != nil {
		t.Fatalf("Delete of a deleted run: %v", err)
	}
	if _, ok, err := cp.Load(ctx, "run-2"); err != nil || !ok {
		t.Fatalf("another run after Delete: %v %v", ok, err)
	}
	again := aRun(t, "run-1", flow, "welcome", "running")
	if err := cp.Save(ctx, again); err != nil {
		t.Fatal(err)
	}
	if got, ok, err := cp.Load(ctx, "run-1"); err != nil || !ok || !reflect.DeepEqual(got, again) {
		t.Fatalf("Load after a new Save: (%+v, %v, %v)", got, ok, err)
	}
}

// Runs are confined to their flow's scope: the same run ID in two flows is
// two runs, and deleting one leaves the other.
func TestEachFlowHasItsOwnRuns(t *testing.T) {
	ctx := context.Background()
	c := dialInstalled(t)
	a, b := flowName(t)+"-a", flowName(t)+"-b"
	cpA, cpB := stepwell.NewCheckpoint(c, a), stepwell.NewCheckpoint(c, b)
	if err := cpA.Save(ctx, aRun(t, "run-1", a, "plan", "running")); err != nil {
		t.Fatal(err)
	}
	if _, ok, err := cpB.Load(ctx, "run-1"); err != nil || ok {
		t.Fatalf("flow b sees flow a's run: %v %v", ok, err)
	}
	runB := aRun(t, "run-1", b, "welcome", "done")
	if err := cpB.Save(ctx, runB); err != nil {
		t.Fatal(err)
	}
	if err := cpA.Delete(ctx, "run-1"); err != nil {
		t.Fatal(err)
	}
	if got, ok, err := cpB.Load(ctx, "run-1"); err != nil || !ok || !reflect.DeepEqual(got, runB) {
		t.Fatalf("flow b's run after flow a deleted its own: (%+v, %v, %v)", got, ok, err)
	}
}

// Set replaces the data with the JSON encoding of v; Scan decodes it into
// the caller's struct, and leaves it alone when there is no data.
func TestStateSetReplacesAndScanDecodes(t *testing.T) {
	var s stepwell.State
	var empty onboarding
	if err := s.Scan(&empty); err != nil || empty != (onboarding{}) {
		t.Fatalf("Scan of no data: %+v %v", empty, err)
	}
	if err := s.Set(onboarding{Email: "a@example.com"}); err != nil {
		t.Fatal(err)
	}
	if err := s.Set(map[string]int{"n": 2}); err != nil {
		t.Fatal(err)
	}
	want, _ := json.Marshal(map[string]int{"n": 2})
	if string(s.Data) != string(want) {
		t.Fatalf("Set: data %s, want %s", s.Data, want)
	}
	var got map[string]int
	if err := s.Scan(&got); err != nil || got["n"] != 2 || len(got) != 1 {
		t.Fatalf("Scan: %v %v", got, err)
	}
	if err := s.Set(func() {}); err == nil {
		t.Fatal("Set of a value JSON cannot encode succeeded")
	}
}
