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

	"google.golang.org/grpc"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	stepwell "stepwell.dev/client"
	pb "stepwell.dev/client/gen/stepwell/v1"
)

type scenario struct {
	Name  string         `json:"name"`
	Steps []scenarioStep `json:"steps"`
}

type scenarioStep struct {
	Call        string         `json:"call"`
	Request     map[string]any `json:"request"`
	Expect      map[string]any `json:"expect"`
	ExpectError *struct {
		Code   string `json:"code"`
		Reason string `json:"reason"`
		Field  string `json:"field"`
	} `json:"expectError"`
	Save      map[string]string `json:"save"`
	Until     map[string]any    `json:"until"`
	TimeoutMs int               `json:"timeoutMs"`
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
	_ = grpc.CallOption(nil)
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
// state is serialized JSON bytes, result and fingerprint UTF-8 strings.
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
	for _, f := range []string{"result", "fingerprint"} {
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
// converts state (parsed JSON) and result (UTF-8 string).
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
			case "result", "fingerprint":
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
	c := dial(t)
	for _, f := range files {
		raw, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		var sc scenario
		d := json.NewDecoder(bytes.NewReader(raw))
		if err := d.Decode(&sc); err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		t.Run(sc.Name, func(t *testing.T) {
			t.Parallel()
			ns := fmt.Sprintf("sc-%s-%08x", strings.ReplaceAll(sc.Name, "_", "-"), rand.Uint32())
			saved := map[string]any{}
			for i, st := range sc.Steps {
				req, call := rpc(c, st.Call)
				if req == nil {
					t.Fatalf("step %d: unknown call %q", i, st.Call)
				}
				buildRequest(t, st.Call, st.Request, ns, saved, req)
				do := func() (proto.Message, error) {
					ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
					defer cancel()
					return call(ctx, req)
				}
				resp, err := do()
				if st.Until != nil {
					timeout := time.Duration(st.TimeoutMs) * time.Millisecond
					if timeout == 0 {
						timeout = 5 * time.Second
					}
					deadline := time.Now().Add(timeout)
					for err != nil || match(st.Until, responseJSON(t, resp), "") != "" {
						if time.Now().After(deadline) {
							t.Fatalf("step %d %s: until %v not reached (last %v, %v)", i, st.Call, st.Until, resp, err)
						}
						time.Sleep(20 * time.Millisecond)
						resp, err = do()
					}
				}
				if st.ExpectError != nil {
					if err == nil {
						t.Fatalf("step %d %s: want error %+v, got %v", i, st.Call, *st.ExpectError, resp)
					}
					var se *stepwell.Error
					if !asError(stepwell.FromError(err), &se) {
						t.Fatalf("step %d: not a *stepwell.Error: %v", i, err)
					}
					code := strings.ToUpper(toSnake(se.Code.String()))
					if code != st.ExpectError.Code || se.Reason != st.ExpectError.Reason ||
						(st.ExpectError.Field != "" && se.Field != st.ExpectError.Field) {
						t.Fatalf("step %d %s: want %+v, got %s %s field %q (%v)", i, st.Call, *st.ExpectError, code, se.Reason, se.Field, se)
					}
					continue
				}
				if err != nil {
					t.Fatalf("step %d %s: %v", i, st.Call, err)
				}
				act := responseJSON(t, resp)
				if st.Expect != nil {
					var exp map[string]any
					b, _ := json.Marshal(st.Expect)
					_ = json.Unmarshal(b, &exp)
					if msg := match(exp, act, st.Call); msg != "" {
						t.Fatalf("step %d: %s\nresponse: %v", i, msg, act)
					}
				}
				for name, field := range st.Save {
					saved[name] = act[field]
				}
			}
		})
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
