// Tests that no client call writes into the caller's request message.

package stepwell_test

import (
	"errors"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	stepwell "stepwell.dev/client"
	pb "stepwell.dev/client/gen/stepwell/v1"
)

// unchanged fails the test when a call wrote into the request it was given.
// It takes a snapshot before the call, so that the check compares with what
// the caller built and not with what the client may have filled in.
func unchanged[M proto.Message](t *testing.T, name string, req M, call func(M) error) {
	t.Helper()
	before := proto.Clone(req)
	if err := call(req); err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	if !proto.Equal(before, req) {
		t.Fatalf("%s modified the caller's request:\n before %v\n after  %v", name, before, req)
	}
}

// Every method of Client fills the client's namespace into requests that
// leave it empty; it must do so on a copy, so that a request can be reused or
// shared without one call changing what the next one sends.
func TestRequestsAreNotModified(t *testing.T) {
	ns := freshNS(t, "copy")
	c := dial(t, stepwell.WithNamespace(ns))
	ts := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

	for i := range 3 {
		req := &pb.CheckpointRequest{TurnId: "t", Phase: "step", State: []byte(`{}`), Timestamp: stepwell.Timestamp(ts.Add(time.Duration(i) * time.Second))}
		unchanged(t, "Checkpoint", req, func(r *pb.CheckpointRequest) error {
			resp, err := c.Checkpoint(ctx, r)
			if err == nil && resp.GetCheckpoint().GetNamespace() != ns {
				t.Fatalf("Checkpoint stored in namespace %q, want the client's %q", resp.GetCheckpoint().GetNamespace(), ns)
			}
			return err
		})
	}
	unchanged(t, "Restore", &pb.RestoreRequest{TurnId: "t", PageSize: 1}, func(r *pb.RestoreRequest) error {
		resp, err := c.Restore(ctx, r)
		if err == nil && len(resp.GetCheckpoints()) != 1 {
			t.Fatalf("Restore in the client's namespace: %v", resp)
		}
		return err
	})
	// RestoreAll follows three pages; the caller's page token must stay as given.
	unchanged(t, "RestoreAll", &pb.RestoreRequest{TurnId: "t", PageSize: 1}, func(r *pb.RestoreRequest) error {
		all, err := c.RestoreAll(ctx, r)
		if err == nil && len(all) != 3 {
			t.Fatalf("RestoreAll: %d checkpoints, want 3", len(all))
		}
		return err
	})
	unchanged(t, "ListTurns", &pb.ListTurnsRequest{Status: pb.TurnStatus_TURN_STATUS_ANY}, func(r *pb.ListTurnsRequest) error {
		resp, err := c.ListTurns(ctx, r)
		if err == nil && len(resp.GetTurns()) != 1 {
			t.Fatalf("ListTurns in the client's namespace: %v", resp)
		}
		return err
	})
	unchanged(t, "DeleteTurn", &pb.DeleteTurnRequest{TurnId: "t"}, func(r *pb.DeleteTurnRequest) error {
		resp, err := c.DeleteTurn(ctx, r)
		if err == nil && resp.GetDeleted() != 3 {
			t.Fatalf("DeleteTurn in the client's namespace: %v", resp)
		}
		return err
	})

	var lease uint64
	unchanged(t, "Begin", &pb.BeginRequest{Key: "k", Lease: stepwell.Duration(time.Minute)}, func(r *pb.BeginRequest) error {
		resp, err := c.Begin(ctx, r)
		lease = resp.GetLeaseToken()
		return err
	})
	unchanged(t, "Extend", &pb.ExtendRequest{Key: "k", LeaseToken: lease, Lease: stepwell.Duration(time.Minute)}, func(r *pb.ExtendRequest) error {
		_, err := c.Extend(ctx, r)
		return err
	})
	unchanged(t, "Complete", &pb.CompleteRequest{Key: "k", LeaseToken: lease, Result: []byte("r")}, func(r *pb.CompleteRequest) error {
		_, err := c.Complete(ctx, r)
		return err
	})
	unchanged(t, "Get", &pb.GetRequest{Key: "k"}, func(r *pb.GetRequest) error {
		_, err := c.Get(ctx, r)
		return err
	})
	unchanged(t, "Begin", &pb.BeginRequest{Key: "k2"}, func(r *pb.BeginRequest) error {
		resp, err := c.Begin(ctx, r)
		lease = resp.GetLeaseToken()
		return err
	})
	unchanged(t, "Release", &pb.ReleaseRequest{Key: "k2", LeaseToken: lease}, func(r *pb.ReleaseRequest) error {
		_, err := c.Release(ctx, r)
		return err
	})

	// A nil request is the empty one (no turn ID), with or without a client
	// namespace to fill in: an error from the sidecar, not a panic.
	for _, client := range []*stepwell.Client{c, dial(t)} {
		if _, err := client.RestoreAll(ctx, nil); !errors.Is(err, stepwell.ErrInvalidArgument) {
			t.Fatalf("RestoreAll(nil): want ErrInvalidArgument, got %v", err)
		}
		if _, err := client.Restore(ctx, nil); !errors.Is(err, stepwell.ErrInvalidArgument) {
			t.Fatalf("Restore(nil): want ErrInvalidArgument, got %v", err)
		}
	}

	// One request sent through clients of two namespaces lands in each: the
	// first call did not pin its namespace into the shared message.
	other := freshNS(t, "copy-other")
	c2 := dial(t, stepwell.WithNamespace(other))
	shared := &pb.CheckpointRequest{TurnId: "shared", Phase: "p", State: []byte(`{}`), Timestamp: stepwell.Timestamp(ts)}
	for _, want := range []struct {
		client *stepwell.Client
		ns     string
	}{{c, ns}, {c2, other}} {
		resp, err := want.client.Checkpoint(ctx, shared)
		if err != nil || !resp.GetInserted() || resp.GetCheckpoint().GetNamespace() != want.ns {
			t.Fatalf("shared request through the client of %q: %v %v", want.ns, resp, err)
		}
	}
}
