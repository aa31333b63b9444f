// Command scenarioworker is the Go client's scenario worker program
// (clients/scenarios/README.md, "Worker steps"): runs that pause for a
// person (approval) or a clock (sleep), which the scenario runners of every
// client start, kill and start again, and a signal that settles a wait on
// behalf of a runner of another language.
//
//	scenarioworker approval --target HOST:PORT --namespace NS --run RUN --effects FILE
//	scenarioworker sleep    --target HOST:PORT --namespace NS --run RUN --effects FILE --seconds S
//	scenarioworker signal   --target HOST:PORT --namespace NS --run RUN --name NAME --payload TEXT
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"time"

	stepwell "stepwell.dev/client"
	pb "stepwell.dev/client/gen/stepwell/v1"
)

// args are the flags of every subcommand; each uses those it needs.
type args struct {
	target, namespace, run, effects, name, payload string
	seconds                                        float64
}

func main() {
	if len(os.Args) < 2 {
		fail(fmt.Errorf("usage: scenarioworker approval|sleep|signal --target HOST:PORT --namespace NS --run RUN ..."))
	}
	var a args
	fs := flag.NewFlagSet(os.Args[1], flag.ExitOnError)
	fs.StringVar(&a.target, "target", "", "the sidecar: host:port or unix:/path")
	fs.StringVar(&a.namespace, "namespace", "", "the scenario run's namespace")
	fs.StringVar(&a.run, "run", "", "the run (turn id)")
	fs.StringVar(&a.effects, "effects", "", "the file the effect appends a line to")
	fs.StringVar(&a.name, "name", "", "signal: the wait's name")
	fs.StringVar(&a.payload, "payload", "", "signal: the payload, as text")
	fs.Float64Var(&a.seconds, "seconds", 0, "sleep: how long from now the run sleeps")
	if err := fs.Parse(os.Args[2:]); err != nil {
		fail(err)
	}
	c, err := stepwell.Dial(a.target, stepwell.WithNamespace(a.namespace))
	if err != nil {
		fail(err)
	}
	defer c.Close()
	ctx := context.Background()
	switch os.Args[1] {
	case "approval":
		err = approval(ctx, c, a)
	case "sleep":
		err = sleep(ctx, c, a)
	case "signal":
		err = signal(ctx, c, a)
	default:
		err = fmt.Errorf("unknown subcommand %q", os.Args[1])
	}
	if err != nil {
		fail(err)
	}
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "scenarioworker:", err)
	os.Exit(1)
}

// approval is a run that pauses for a person: it checkpoints "waiting" (on
// its first start), makes the wait "approve", waits for its signal, runs
// the effect once and checkpoints "done".
func approval(ctx context.Context, c *stepwell.Client, a args) error {
	last, err := restoreOrStart(ctx, c, a.run, "waiting")
	if err != nil {
		return err
	}
	if _, err := c.CreateWait(ctx, &pb.CreateWaitRequest{TurnId: a.run, Name: "approve"}); err != nil {
		return err
	}
	fmt.Println("waiting")
	payload, err := c.WaitForSignal(ctx, a.run, "approve")
	if err != nil {
		return err
	}
	result, err := effect(ctx, c, a, string(payload))
	if err != nil {
		return err
	}
	if err := checkpoint(ctx, c, a.run, "done", last); err != nil {
		return err
	}
	fmt.Println("done " + result)
	return nil
}

// sleep is a run that sleeps durably: it checkpoints "sleeping" (on its
// first start), makes the wait "nap" with its timer --seconds from now,
// sleeps until the wait's timer (the first start's, whichever start this
// is), runs the effect once and checkpoints "woke".
func sleep(ctx context.Context, c *stepwell.Client, a args) error {
	last, err := restoreOrStart(ctx, c, a.run, "sleeping")
	if err != nil {
		return err
	}
	when := time.Now().Add(time.Duration(a.seconds * float64(time.Second)))
	if _, err := c.CreateWait(ctx, &pb.CreateWaitRequest{TurnId: a.run, Name: "nap", ResolveAt: stepwell.Timestamp(when)}); err != nil {
		return err
	}
	fmt.Println("sleeping")
	if err := c.SleepUntil(ctx, a.run, "nap", when); err != nil {
		return err
	}
	if _, err := effect(ctx, c, a, ""); err != nil {
		return err
	}
	if err := checkpoint(ctx, c, a.run, "woke", last); err != nil {
		return err
	}
	fmt.Println("woke")
	return nil
}

// signal settles the wait --name of the run with --payload and says
// whether this call settled it or repeated the winning signal.
func signal(ctx context.Context, c *stepwell.Client, a args) error {
	settled, err := c.Signal(ctx, a.run, a.name, []byte(a.payload))
	if err != nil {
		return err
	}
	if settled {
		fmt.Println("settled")
	} else {
		fmt.Println("repeat")
	}
	return nil
}

// restoreOrStart returns the time of the run's newest checkpoint, after
// checkpointing phase first when the run has none yet.
func restoreOrStart(ctx context.Context, c *stepwell.Client, run, first string) (time.Time, error) {
	r, err := c.Restore(ctx, &pb.RestoreRequest{TurnId: run, NewestFirst: true, PageSize: 1})
	if err != nil {
		return time.Time{}, err
	}
	if cps := r.GetCheckpoints(); len(cps) > 0 {
		return cps[0].GetTimestamp().AsTime(), nil
	}
	now := time.Now()
	return now, checkpointAt(ctx, c, run, first, now)
}

// checkpoint saves phase after the run's newest checkpoint, so that the
// order of phases never depends on the clocks of two workers agreeing.
func checkpoint(ctx context.Context, c *stepwell.Client, run, phase string, last time.Time) error {
	at := time.Now()
	if !at.After(last) {
		at = last.Add(time.Millisecond)
	}
	return checkpointAt(ctx, c, run, phase, at)
}

func checkpointAt(ctx context.Context, c *stepwell.Client, run, phase string, at time.Time) error {
	_, err := c.Checkpoint(ctx, &pb.CheckpointRequest{
		TurnId: run, Phase: phase, State: []byte(`{"phase":"` + phase + `"}`), Timestamp: stepwell.Timestamp(at),
	})
	return err
}

// effect runs the run's effect through Once (key RUN/effect): it appends a
// line to the effects file and returns "done:" and the payload, so that the
// runner can count how often it ran, however often the run's workers died.
func effect(ctx context.Context, c *stepwell.Client, a args, payload string) (string, error) {
	return stepwell.Once(ctx, c, stepwell.StepKey(a.run, "effect"), func(context.Context, stepwell.OnceInfo) (string, error) {
		f, err := os.OpenFile(a.effects, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
		if err != nil {
			return "", err
		}
		if _, err := fmt.Fprintf(f, "%s %s\n", a.run, payload); err != nil {
			f.Close()
			return "", err
		}
		return "done:" + payload, f.Close()
	})
}
