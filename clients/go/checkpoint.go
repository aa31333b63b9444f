// StoreCheckpoint: the flow engine's Checkpoint on stepwell's checkpoint log,
// with its Run, State and StepRecord types and skew-proof ordering of saves.

package stepwell

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc/codes"

	pb "stepwell.dev/client/gen/stepwell/v1"
)

// The flow engine's durability types, declared exactly as the flow engine
// declares them, so StoreCheckpoint drops in. Their contract, as tests, is
// testdata/installed/checkpoint_contract_test.go.

// State is what carries across steps: typed Data plus a Stage marker.
type State struct {
	Stage string // name of the step the run is at — where it is
	Data  []byte // carried data, serialized; use Set / Scan
}

// Set replaces the data with the JSON encoding of v.
func (s *State) Set(v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	s.Data = b
	return nil
}

// Scan decodes the data into v (a pointer to the caller's struct).
func (s State) Scan(v any) error {
	if len(s.Data) == 0 {
		return nil
	}
	return json.Unmarshal(s.Data, v)
}

// Run is the persisted record of one execution: what Checkpoint saves and loads.
type Run struct {
	ID      string       // durable run id (idempotency root)
	Flow    string       // flow name
	State   State        // carried data + Stage (where it is)
	Steps   []StepRecord // per-step status + outcome (history/audit)
	Status  string       // running | done | failed
	Started time.Time
	Updated time.Time
}

// StepRecord is the status and outcome of one step of a run.
type StepRecord struct {
	Name     string
	Status   string // pending | in_progress | done | failed
	Attempts int    // how many tries this step took
	Result   string // short serialized outcome / summary
	Error    string
}

// Checkpoint is the pluggable durability primitive: persists and restores a Run.
type Checkpoint interface {
	Save(ctx context.Context, run Run) error
	Load(ctx context.Context, runID string) (Run, bool, error)
	Delete(ctx context.Context, runID string) error
}

var _ Checkpoint = (*StoreCheckpoint)(nil)

// StoreCheckpoint is a Checkpoint on stepwell's checkpoint log.
//
// Each run is a turn (turn_id = run ID); every Save appends one checkpoint
// (phase = run.State.Stage, or "run" when the stage is empty; state = the
// whole Run as JSON; terminal when Status is "done" or "failed"), so the
// full history stays restorable (History) while Load reads only the newest.
//
// Runs are confined to one scope per flow name, as the flow engine's own
// store.Scope does with one table per flow: the flow name is mapped onto a stepwell
// namespace (FlowNamespace). Namespaces are the contract's isolation
// boundary: nothing in one namespace is visible from another, so a run ID
// used by two flows names two independent runs, and ListTurns in a flow's
// namespace lists only that flow's runs. A turn-id prefix in one shared
// namespace would give none of that.
type StoreCheckpoint struct {
	client    *Client
	flow      string
	namespace string

	mu   sync.Mutex
	last map[string]time.Time // newest timestamp used or seen per run, to keep them strictly increasing
	now  func() time.Time
}

// NewCheckpoint returns the Checkpoint of the flow named flowName, stored in
// the namespace FlowNamespace(flowName).
func NewCheckpoint(client *Client, flowName string) *StoreCheckpoint {
	return &StoreCheckpoint{
		client:    client,
		flow:      flowName,
		namespace: FlowNamespace(flowName),
		last:      map[string]time.Time{},
		now:       time.Now,
	}
}

// WithClock makes the checkpoint stamp saves from now instead of the
// system clock (tests inject skewed clocks with it). Order never depends on
// clocks agreeing: a save is always stamped after the newest checkpoint of
// its run this checkpoint has loaded, saved, or (before its first save of a
// run) read from the store.
func (s *StoreCheckpoint) WithClock(now func() time.Time) *StoreCheckpoint {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.now = now
	return s
}

// Namespace returns the namespace the flow's runs are stored in.
func (s *StoreCheckpoint) Namespace() string { return s.namespace }

// FlowNamespace maps a flow name onto a namespace ([a-z0-9][a-z0-9._-]{0,62}):
// "flow-" + the name lower-cased with other characters replaced by "-". When
// that changed the name (or it is too long), a short hash of the original is
// appended so that distinct flow names never share a namespace.
func FlowNamespace(flow string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(flow) {
		switch {
		case r >= 'a' && r <= 'z', r >= '0' && r <= '9', r == '.', r == '_', r == '-':
			b.WriteRune(r)
		default:
			b.WriteByte('-')
		}
	}
	ns := "flow-" + b.String()
	if b.String() != flow || len(ns) > 63 {
		sum := sha256.Sum256([]byte(flow))
		h := hex.EncodeToString(sum[:4])
		if len(ns) > 63-9 {
			ns = ns[:63-9]
		}
		ns += "-" + h
	}
	return ns
}

func (s *StoreCheckpoint) timestamp(runID string) time.Time {
	s.mu.Lock()
	defer s.mu.Unlock()
	t := s.now().UTC()
	if l, ok := s.last[runID]; ok && !t.After(l) {
		t = l.Add(time.Nanosecond)
	}
	s.last[runID] = t
	return t
}

func (s *StoreCheckpoint) known(runID string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	_, ok := s.last[runID]
	return ok
}

func (s *StoreCheckpoint) seen(runID string, t time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if t.After(s.last[runID]) {
		s.last[runID] = t
	}
}

// Save appends the run as the newest checkpoint of its turn.
func (s *StoreCheckpoint) Save(ctx context.Context, run Run) error {
	if run.ID == "" {
		return newError(codes.InvalidArgument, "FIELD_REQUIRED", "run ID is required", nil)
	}
	if run.Flow == "" {
		run.Flow = s.flow
	}
	state, err := json.Marshal(run)
	if err != nil {
		return fmt.Errorf("stepwell: encoding run %q: %w", run.ID, err)
	}
	phase := run.State.Stage
	if phase == "" {
		phase = "run"
	}
	if !s.known(run.ID) {
		// A run this checkpoint has not seen may have newer checkpoints from
		// another worker whose clock is ahead: stamp after the newest stored.
		resp, err := s.client.Restore(ctx, &pb.RestoreRequest{Namespace: s.namespace, TurnId: run.ID, PageSize: 1, NewestFirst: true})
		if err != nil {
			return err
		}
		for _, cp := range resp.GetCheckpoints() {
			s.seen(run.ID, cp.GetTimestamp().AsTime())
		}
	}
	_, err = s.client.Checkpoint(ctx, &pb.CheckpointRequest{
		Namespace: s.namespace,
		TurnId:    run.ID,
		Phase:     phase,
		State:     state,
		Timestamp: Timestamp(s.timestamp(run.ID)),
		Terminal:  run.Status == "done" || run.Status == "failed",
	})
	return err
}

// Load returns the newest saved Run of runID, or false when there is none.
func (s *StoreCheckpoint) Load(ctx context.Context, runID string) (Run, bool, error) {
	resp, err := s.client.Restore(ctx, &pb.RestoreRequest{Namespace: s.namespace, TurnId: runID, PageSize: 1, NewestFirst: true})
	if err != nil {
		return Run{}, false, err
	}
	if len(resp.GetCheckpoints()) == 0 {
		return Run{}, false, nil
	}
	cp := resp.GetCheckpoints()[0]
	s.seen(runID, cp.GetTimestamp().AsTime())
	var run Run
	if err := json.Unmarshal(cp.GetState(), &run); err != nil {
		return Run{}, false, fmt.Errorf("stepwell: decoding run %q: %w", runID, err)
	}
	return run, true, nil
}

// Delete deletes every saved checkpoint of runID.
func (s *StoreCheckpoint) Delete(ctx context.Context, runID string) error {
	_, err := s.client.DeleteTurn(ctx, &pb.DeleteTurnRequest{Namespace: s.namespace, TurnId: runID})
	s.mu.Lock()
	delete(s.last, runID)
	s.mu.Unlock()
	return err
}

// History returns every saved version of runID, oldest first.
func (s *StoreCheckpoint) History(ctx context.Context, runID string) ([]Run, error) {
	cps, err := s.client.RestoreAll(ctx, &pb.RestoreRequest{Namespace: s.namespace, TurnId: runID})
	if err != nil {
		return nil, err
	}
	runs := make([]Run, 0, len(cps))
	for _, cp := range cps {
		var run Run
		if err := json.Unmarshal(cp.GetState(), &run); err != nil {
			return nil, fmt.Errorf("stepwell: decoding run %q: %w", runID, err)
		}
		runs = append(runs, run)
	}
	return runs, nil
}

// Runs lists the flow's runs (turn summaries); status filters open or finished runs.
func (s *StoreCheckpoint) Runs(ctx context.Context, status pb.TurnStatus) ([]*pb.TurnSummary, error) {
	var out []*pb.TurnSummary
	req := &pb.ListTurnsRequest{Namespace: s.namespace, Status: status}
	for {
		resp, err := s.client.ListTurns(ctx, req)
		if err != nil {
			return nil, err
		}
		out = append(out, resp.GetTurns()...)
		if resp.GetNextPageToken() == "" {
			return out, nil
		}
		req.PageToken = resp.GetNextPageToken()
	}
}
