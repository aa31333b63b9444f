// The scenario runner: runs every clients/scenarios/*.json against a real
// sidecar (the shared one, or a sidecar of the scenario's own when it has
// sidecar steps), following clients/scenarios/README.md.

package stepwell_test

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	stepwell "stepwell.dev/client"
	pb "stepwell.dev/client/gen/stepwell/v1"
)

type scenario struct {
	Name        string `json:"name"`
	Description string `json:"description"`
	// AdapterStamps says the adapter steps' expectations are those of an
	// adapter that stamps saves from its own clock, as StoreCheckpoint does,
	// so this runner checks them as they are.
	AdapterStamps bool           `json:"adapterStamps"`
	Steps         []scenarioStep `json:"steps"`
}

// scenarioStep is one step: an RPC (call), an adapter step (adapter), a
// sidecar step (sidecar), a worker step (worker), a signal through the peer
// (signal) or a count of effects (effects); see clients/scenarios/README.md.
type scenarioStep struct {
	Call        string          `json:"call"`
	Request     map[string]any  `json:"request"`
	Expect      json.RawMessage `json:"expect"`
	ExpectError *struct {
		Code   string `json:"code"`
		Reason string `json:"reason"`
		Field  string `json:"field"`
	} `json:"expectError"`
	Save       map[string]string `json:"save"`
	Until      map[string]any    `json:"until"`
	RetryWhile string            `json:"retryWhile"`
	TimeoutMs  int               `json:"timeoutMs"`

	Adapter string          `json:"adapter"`
	Worker  string          `json:"worker"`
	Clock   string          `json:"clock"`
	Run     string          `json:"run"`
	Step    string          `json:"step"`
	State   json.RawMessage `json:"state"`

	Sidecar string `json:"sidecar"`

	// Worker steps (with Worker and no Adapter), the peer's signal step
	// and the effects step; see scenario_workers_test.go.
	Start   string          `json:"start"`
	Seconds float64         `json:"seconds"`
	Line    string          `json:"line"`
	Kill    bool            `json:"kill"`
	Exit    *int            `json:"exit"`
	Signal  *scenarioSignal `json:"signal"`
	Effects *int            `json:"effects"`
}

// rpc maps a call name onto its request type and the raw stub method (the
// lowest layer: one call per RPC, no retries).
func rpc(c *stepwell.Client, call string) (proto.Message, func(context.Context, proto.Message) (proto.Message, error)) {
	cp, id := c.CheckpointService(), c.IdempotencyService()
	wrap := func(req proto.Message, f any) (proto.Message, func(context.Context, proto.Message) (proto.Message, error)) {
		return req, func(ctx context.Context, m proto.Message) (proto.Message, error) {
			out := reflect.ValueOf(f).Call([]reflect.Value{reflect.ValueOf(ctx), reflect.ValueOf(m)})
			if err, _ := out[1].Interface().(error); err != nil {
				return nil, err
			}
			return out[0].Interface().(proto.Message), nil
		}
	}
	switch call {
	case "Checkpoint":
		return wrap(&pb.CheckpointRequest{}, func(ctx context.Context, r *pb.CheckpointRequest) (*pb.CheckpointResponse, error) {
			return cp.Checkpoint(ctx, r)
		})
	case "Restore":
		return wrap(&pb.RestoreRequest{}, func(ctx context.Context, r *pb.RestoreRequest) (*pb.RestoreResponse, error) {
			return cp.Restore(ctx, r)
		})
	case "ListTurns":
		return wrap(&pb.ListTurnsRequest{}, func(ctx context.Context, r *pb.ListTurnsRequest) (*pb.ListTurnsResponse, error) {
			return cp.ListTurns(ctx, r)
		})
	case "DeleteTurn":
		return wrap(&pb.DeleteTurnRequest{}, func(ctx context.Context, r *pb.DeleteTurnRequest) (*pb.DeleteTurnResponse, error) {
			return cp.DeleteTurn(ctx, r)
		})
	case "Begin":
		return wrap(&pb.BeginRequest{}, func(ctx context.Context, r *pb.BeginRequest) (*pb.BeginResponse, error) { return id.Begin(ctx, r) })
	case "Complete":
		return wrap(&pb.CompleteRequest{}, func(ctx context.Context, r *pb.CompleteRequest) (*pb.CompleteResponse, error) {
			return id.Complete(ctx, r)
		})
	case "Release":
		return wrap(&pb.ReleaseRequest{}, func(ctx context.Context, r *pb.ReleaseRequest) (*pb.ReleaseResponse, error) {
			return id.Release(ctx, r)
		})
	case "Extend":
		return wrap(&pb.ExtendRequest{}, func(ctx context.Context, r *pb.ExtendRequest) (*pb.ExtendResponse, error) { return id.Extend(ctx, r) })
	case "Get":
		return wrap(&pb.GetRequest{}, func(ctx context.Context, r *pb.GetRequest) (*pb.GetResponse, error) { return id.Get(ctx, r) })
	}
	return waitRPC(c, call, wrap)
}

// waitRPC is rpc for the calls of WaitService.
func waitRPC(c *stepwell.Client, call string, wrap func(proto.Message, any) (proto.Message, func(context.Context, proto.Message) (proto.Message, error))) (proto.Message, func(context.Context, proto.Message) (proto.Message, error)) {
	w := c.WaitService()
	switch call {
	case "CreateWait":
		return wrap(&pb.CreateWaitRequest{}, w.CreateWait)
	case "Signal":
		return wrap(&pb.SignalRequest{}, w.Signal)
	case "Await":
		return wrap(&pb.AwaitRequest{}, w.Await)
	case "GetWait":
		return wrap(&pb.GetWaitRequest{}, w.GetWait)
	case "ListWaits":
		return wrap(&pb.ListWaitsRequest{}, w.ListWaits)
	case "CancelWait":
		return wrap(&pb.CancelWaitRequest{}, w.CancelWait)
	}
	return nil, nil
}

// substitute replaces "$name" strings with saved values.
func substitute(v any, saved map[string]any) any {
	switch x := v.(type) {
	case string:
		if strings.HasPrefix(x, "$") {
			if s, ok := saved[x[1:]]; ok {
				return s
			}
		}
		return x
	case map[string]any:
		out := map[string]any{}
		for k, e := range x {
			out[k] = substitute(e, saved)
		}
		return out
	case []any:
		out := make([]any, len(x))
		for i, e := range x {
			out[i] = substitute(e, saved)
		}
		return out
	}
	return v
}

// buildRequest turns a scenario request into the protobuf JSON mapping:
// state is serialized JSON bytes, result, fingerprint and payload UTF-8
// strings.
func buildRequest(t *testing.T, call string, req map[string]any, ns string, saved map[string]any, msg proto.Message) {
	t.Helper()
	r := substitute(req, saved).(map[string]any)
	if n, ok := r["namespace"].(string); ok {
		r["namespace"] = strings.ReplaceAll(n, "$ns", ns)
	} else {
		r["namespace"] = ns
	}
	if s, ok := r["state"]; ok && call == "Checkpoint" {
		b, _ := json.Marshal(s)
		r["state"] = base64.StdEncoding.EncodeToString(b)
	}
	for _, f := range []string{"result", "fingerprint", "payload"} {
		if s, ok := r[f].(string); ok {
			r[f] = base64.StdEncoding.EncodeToString([]byte(s))
		}
	}
	raw, _ := json.Marshal(r)
	if err := protojson.Unmarshal(raw, msg); err != nil {
		t.Fatalf("request %s: %v", raw, err)
	}
}

// responseJSON renders a response in the JSON mapping with defaults, then
// converts state (parsed JSON), result and payload (UTF-8 strings).
func responseJSON(t *testing.T, m proto.Message) map[string]any {
	t.Helper()
	raw, err := protojson.MarshalOptions{EmitUnpopulated: true}.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	var out map[string]any
	d := json.NewDecoder(bytes.NewReader(raw))
	d.UseNumber()
	if err := d.Decode(&out); err != nil {
		t.Fatal(err)
	}
	return convert(out).(map[string]any)
}

func convert(v any) any {
	switch x := v.(type) {
	case map[string]any:
		for k, e := range x {
			switch k {
			case "state":
				if s, ok := e.(string); ok {
					if b, err := base64.StdEncoding.DecodeString(s); err == nil {
						var j any
						if json.Unmarshal(b, &j) == nil {
							x[k] = j
							continue
						}
					}
				}
			case "result", "fingerprint", "payload":
				if s, ok := e.(string); ok {
					if b, err := base64.StdEncoding.DecodeString(s); err == nil {
						x[k] = string(b)
						continue
					}
				}
			}
			x[k] = convert(e)
		}
		return x
	case []any:
		for i, e := range x {
			x[i] = convert(e)
		}
	}
	return v
}

func num(v any) (float64, bool) {
	switch x := v.(type) {
	case float64:
		return x, true
	case json.Number:
		f, err := x.Float64()
		return f, err == nil
	case string:
		f, err := strconv.ParseFloat(x, 64)
		return f, err == nil
	}
	return 0, false
}

// match reports where actual fails the subset expectation ("" if it matches).
func match(exp, act any, path string) string {
	switch e := exp.(type) {
	case map[string]any:
		a, _ := act.(map[string]any)
		for k, ev := range e {
			if msg := match(ev, a[k], path+"."+k); msg != "" {
				return msg
			}
		}
		return ""
	case []any:
		a, _ := act.([]any)
		if len(a) != len(e) {
			return fmt.Sprintf("%s: want %d elements, got %d (%v)", path, len(e), len(a), act)
		}
		for i := range e {
			if msg := match(e[i], a[i], fmt.Sprintf("%s[%d]", path, i)); msg != "" {
				return msg
			}
		}
		return ""
	case float64:
		if a, ok := num(act); ok && a == e {
			return ""
		}
		if act == nil && e == 0 {
			return ""
		}
	case bool:
		if act == e || (act == nil && !e) {
			return ""
		}
	case string:
		if act == e || (act == nil && e == "") {
			return ""
		}
		if e != "" {
			// Timestamps: compare as instants.
			te, err1 := time.Parse(time.RFC3339Nano, e)
			ta, err2 := time.Parse(time.RFC3339Nano, fmt.Sprint(act))
			if err1 == nil && err2 == nil && te.Equal(ta) {
				return ""
			}
		}
	case nil:
		if act == nil {
			return ""
		}
	}
	if act == nil {
		if f, ok := exp.(float64); ok && f == 0 {
			return ""
		}
	}
	// json.Number vs float64 handled above; anything else is a mismatch.
	return fmt.Sprintf("%s: want %v, got %v", path, exp, act)
}

func TestScenarios(t *testing.T) {
	files, err := filepath.Glob("../scenarios/*.json")
	if err != nil || len(files) == 0 {
		t.Fatalf("no scenarios found: %v", err)
	}
	shared := dial(t)
	for _, f := range files {
		raw, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		var sc scenario
		d := json.NewDecoder(bytes.NewReader(raw))
		d.DisallowUnknownFields()
		if err := d.Decode(&sc); err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		t.Run(sc.Name, func(t *testing.T) {
			t.Parallel()
			r := &scenarioRun{
				t:       t,
				c:       shared,
				ns:      fmt.Sprintf("sc-%s-%08x", strings.ReplaceAll(sc.Name, "_", "-"), rand.Uint32()),
				saved:   map[string]any{},
				workers: map[string]*worker{},
				procs:   map[string]*workerProc{},
				effects: filepath.Join(t.TempDir(), "effects"),
			}
			r.ownSidecar(sc)
			for i, st := range sc.Steps {
				r.step(i, st)
			}
		})
	}
}

// ownSidecar starts the scenario's own sidecar, when it has sidecar or
// worker steps, before the first step; the scenario's client is made once,
// on it, and never remade. Worker processes reach it by address alone, so a
// scenario with worker or peer steps gets a plaintext sidecar in both passes.
func (r *scenarioRun) ownSidecar(sc scenario) {
	workers, sidecar := false, false
	for _, st := range sc.Steps {
		workers = workers || (st.Worker != "" && st.Adapter == "") || st.Signal != nil
		sidecar = sidecar || st.Sidecar != ""
	}
	switch {
	case workers:
		r.sidecar = newPlainSidecar(r.t)
		r.c = dialPlain(r.t, r.sidecar.target)
	case sidecar:
		r.sidecar = newOwnSidecar(r.t)
		r.c = dialTo(r.t, r.sidecar.target)
	}
}

// scenarioRun is the state of one scenario run.
type scenarioRun struct {
	t       *testing.T
	c       *stepwell.Client // the scenario's client: made once, never remade
	ns      string           // the run's fresh namespace
	saved   map[string]any
	workers map[string]*worker
	sidecar *ownSidecar // nil unless the scenario has sidecar steps
	procs   map[string]*workerProc
	effects string // the effects file the run's worker processes share
}

// worker is one adapter of an adapter step's worker, with its own clock.
type worker struct {
	cp    *stepwell.StoreCheckpoint
	clock time.Time // zero until a step sets it: then the system clock
}

func (r *scenarioRun) step(i int, st scenarioStep) {
	t := r.t
	t.Helper()
	kinds := 0
	for _, k := range []bool{st.Call != "", st.Adapter != "", st.Sidecar != "",
		st.Worker != "" && st.Adapter == "", st.Signal != nil, st.Effects != nil} {
		if k {
			kinds++
		}
	}
	if kinds != 1 {
		t.Fatalf("step %d: give exactly one of call, adapter, sidecar, worker, signal, effects", i)
	}
	switch {
	case st.Worker != "" && st.Adapter == "":
		r.workerStep(i, st)
	case st.Signal != nil:
		r.peerSignal(i, st)
	case st.Effects != nil:
		r.checkEffects(i, *st.Effects)
	case st.Sidecar != "":
		switch st.Sidecar {
		case "stop":
			r.sidecar.Stop()
		case "start":
			r.sidecar.Start()
		case "restart":
			r.sidecar.Stop()
			r.sidecar.Start()
		default:
			t.Fatalf("step %d: unknown sidecar step %q", i, st.Sidecar)
		}
	case st.Adapter != "":
		r.adapterStep(i, st)
	default:
		r.callStep(i, st)
	}
}

// errorCode names err's gRPC status code as the scenarios do ("ALREADY_EXISTS").
func errorCode(err error) string {
	var se *stepwell.Error
	if !asError(stepwell.FromError(err), &se) {
		return ""
	}
	return strings.ToUpper(toSnake(se.Code.String()))
}

func (r *scenarioRun) callStep(i int, st scenarioStep) {
	t := r.t
	t.Helper()
	req, call := rpc(r.c, st.Call)
	if req == nil {
		t.Fatalf("step %d: unknown call %q", i, st.Call)
	}
	buildRequest(t, st.Call, st.Request, r.ns, r.saved, req)
	do := func() (proto.Message, error) {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		return call(ctx, req)
	}
	timeout := time.Duration(st.TimeoutMs) * time.Millisecond
	if timeout == 0 {
		timeout = 5 * time.Second
	}
	deadline := time.Now().Add(timeout)
	resp, err := do()
	for time.Now().Before(deadline) {
		retry := st.RetryWhile != "" && err != nil && errorCode(err) == st.RetryWhile
		if !retry && st.Until != nil {
			retry = err != nil || match(st.Until, responseJSON(t, resp), "") != ""
		}
		if !retry {
			break
		}
		time.Sleep(20 * time.Millisecond)
		resp, err = do()
	}
	if st.Until != nil && (err != nil || match(st.Until, responseJSON(t, resp), "") != "") {
		t.Fatalf("step %d %s: until %v not reached in %v (last %v, %v)", i, st.Call, st.Until, timeout, resp, err)
	}
	if st.ExpectError != nil {
		if err == nil {
			t.Fatalf("step %d %s: want error %+v, got %v", i, st.Call, *st.ExpectError, resp)
		}
		var se *stepwell.Error
		if !asError(stepwell.FromError(err), &se) {
			t.Fatalf("step %d: not a *stepwell.Error: %v", i, err)
		}
		code := errorCode(err)
		if code != st.ExpectError.Code ||
			(st.ExpectError.Reason != "" && se.Reason != st.ExpectError.Reason) ||
			(st.ExpectError.Field != "" && se.Field != st.ExpectError.Field) {
			t.Fatalf("step %d %s: want %+v, got %s %s field %q (%v)", i, st.Call, *st.ExpectError, code, se.Reason, se.Field, se)
		}
		return
	}
	if err != nil {
		t.Fatalf("step %d %s: %v", i, st.Call, err)
	}
	act := responseJSON(t, resp)
	if exp := expectation(t, i, st); exp != nil {
		if msg := match(exp, act, st.Call); msg != "" {
			t.Fatalf("step %d: %s\nresponse: %v", i, msg, act)
		}
	}
	for name, field := range st.Save {
		r.saved[name] = act[field]
	}
}

// expectation decodes a step's expect (nil when the step has none).
func expectation(t *testing.T, i int, st scenarioStep) any {
	t.Helper()
	if len(st.Expect) == 0 {
		return nil
	}
	var exp any
	if err := json.Unmarshal(st.Expect, &exp); err != nil {
		t.Fatalf("step %d: expect: %v", i, err)
	}
	return exp
}

// worker returns the adapter of the named worker, made on first use: a
// StoreCheckpoint on the scenario's client, in the flow named after the
// run's fresh namespace (so its namespace is fresh too), reading the
// worker's own clock.
func (r *scenarioRun) worker(name string) *worker {
	if w, ok := r.workers[name]; ok {
		return w
	}
	w := &worker{}
	w.cp = stepwell.NewCheckpoint(r.c, r.ns).WithClock(func() time.Time {
		if w.clock.IsZero() {
			return time.Now()
		}
		return w.clock
	})
	r.workers[name] = w
	return w
}

func (r *scenarioRun) adapterStep(i int, st scenarioStep) {
	t := r.t
	t.Helper()
	if st.Worker == "" || st.Run == "" {
		t.Fatalf("step %d: an adapter step needs worker and run", i)
	}
	if st.ExpectError != nil || st.RetryWhile != "" || st.Until != nil || st.Save != nil {
		t.Fatalf("step %d: adapter steps take no expectError, retryWhile, until or save", i)
	}
	w := r.worker(st.Worker)
	if st.Clock != "" {
		c, err := time.Parse(time.RFC3339Nano, st.Clock)
		if err != nil {
			t.Fatalf("step %d: clock: %v", i, err)
		}
		w.clock = c
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var act any
	switch st.Adapter {
	case "save":
		var state any
		if err := json.Unmarshal(st.State, &state); err != nil {
			t.Fatalf("step %d: state: %v", i, err)
		}
		run := stepwell.Run{ID: st.Run, State: stepwell.State{Stage: st.Step}}
		if err := run.State.Set(state); err != nil {
			t.Fatal(err)
		}
		if err := w.cp.Save(ctx, run); err != nil {
			t.Fatalf("step %d: adapter save (worker %s, run %s, step %s): %v", i, st.Worker, st.Run, st.Step, err)
		}
		return
	case "load":
		run, ok, err := w.cp.Load(ctx, st.Run)
		if err != nil {
			t.Fatalf("step %d: adapter load (worker %s, run %s): %v", i, st.Worker, st.Run, err)
		}
		if ok {
			var state any
			if err := run.State.Scan(&state); err != nil {
				t.Fatalf("step %d: state: %v", i, err)
			}
			act = map[string]any{"step": run.State.Stage, "state": state}
		}
	case "history":
		runs, err := w.cp.History(ctx, st.Run)
		if err != nil {
			t.Fatalf("step %d: adapter history (worker %s, run %s): %v", i, st.Worker, st.Run, err)
		}
		steps := make([]any, len(runs))
		for j, run := range runs {
			steps[j] = run.State.Stage
		}
		act = map[string]any{"steps": steps}
	default:
		t.Fatalf("step %d: unknown adapter step %q", i, st.Adapter)
	}
	if len(st.Expect) == 0 {
		return
	}
	if msg := match(expectation(t, i, st), act, st.Adapter); msg != "" {
		t.Fatalf("step %d: adapter %s (worker %s, run %s): %s\ngot: %v", i, st.Adapter, st.Worker, st.Run, msg, act)
	}
}

// toSnake turns a codes.Code name ("AlreadyExists") into ALREADY_EXISTS form.
func toSnake(s string) string {
	if s == "OK" {
		return s
	}
	var b strings.Builder
	for i, r := range s {
		if i > 0 && r >= 'A' && r <= 'Z' {
			b.WriteByte('_')
		}
		b.WriteRune(r)
	}
	return b.String()
}
