// Command flow runs a flow's step loop (plan → workspace → welcome) on
// stepwell: the Run is saved through StoreCheckpoint at every step boundary,
// and each step's side effect goes through Once with the key runID/step, so
// a crash and a rerun resume at State.Stage without repeating an effect.
//
//	go run ./examples/flow -target 127.0.0.1:7070 -run run-1 -crash-after workspace  # exits 137
//	go run ./examples/flow -target 127.0.0.1:7070 -run run-1                         # resumes
package main

import (
	"context"
	"flag"
	"fmt"
	"log"
	"os"
	"time"

	stepwell "stepwell.dev/client"
)

// Onboarding is the flow's carried data.
type Onboarding struct {
	Email       string `json:"email"`
	Plan        string `json:"plan,omitempty"`
	WorkspaceID string `json:"workspace_id,omitempty"`
	WelcomeSent bool   `json:"welcome_sent,omitempty"`
}

type step struct {
	name string
	run  func(ctx context.Context, d *Onboarding, info stepwell.OnceInfo) (string, error)
}

var steps = []step{
	{"plan", func(_ context.Context, d *Onboarding, _ stepwell.OnceInfo) (string, error) {
		return "plan for " + d.Email, nil
	}},
	{"workspace", func(_ context.Context, d *Onboarding, info stepwell.OnceInfo) (string, error) {
		return fmt.Sprintf("ws-%d", info.LeaseToken), nil
	}},
	{"welcome", func(_ context.Context, d *Onboarding, _ stepwell.OnceInfo) (string, error) {
		return "welcome mail to " + d.Email, nil
	}},
}

func main() {
	target := flag.String("target", "127.0.0.1:7070", "sidecar address: host:port or unix:/path")
	runID := flag.String("run", "run-1", "durable run id")
	flowName := flag.String("flow", "onboard-user", "flow name (the checkpoint scope)")
	crashAfter := flag.String("crash-after", "", "exit 137 right after this step's effect, before the step is saved done")
	flag.Parse()

	c, err := stepwell.Dial(*target)
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()
	ctx := context.Background()
	cp := stepwell.NewCheckpoint(c, *flowName)

	run, ok, err := cp.Load(ctx, *runID)
	if err != nil {
		log.Fatal(err)
	}
	if ok && (run.Status == "done") {
		fmt.Printf("run %s already done\n", run.ID)
		return
	}
	if !ok {
		now := time.Now().UTC()
		run = stepwell.Run{ID: *runID, Flow: *flowName, Status: "running", Started: now, Updated: now,
			State: stepwell.State{Stage: steps[0].name}}
		for _, s := range steps {
			run.Steps = append(run.Steps, stepwell.StepRecord{Name: s.name, Status: "pending"})
		}
		if err := run.State.Set(Onboarding{Email: "ada@example.com"}); err != nil {
			log.Fatal(err)
		}
		fmt.Printf("run %s started\n", run.ID)
	} else {
		run.Status = "running"
		fmt.Printf("run %s resuming at %s\n", run.ID, run.State.Stage)
	}

	start := 0
	for i, s := range steps {
		if s.name == run.State.Stage {
			start = i
		}
	}
	save := func() {
		run.Updated = time.Now().UTC()
		if err := cp.Save(ctx, run); err != nil {
			log.Fatal(err)
		}
	}
	for i := start; i < len(steps); i++ {
		s := steps[i]
		run.Steps[i].Status = "in_progress"
		save()
		var data Onboarding
		if err := run.State.Scan(&data); err != nil {
			log.Fatal(err)
		}
		ran := false
		result, err := stepwell.Once(ctx, c, stepwell.StepKey(run.ID, s.name), func(ctx context.Context, info stepwell.OnceInfo) (string, error) {
			ran = true
			return s.run(ctx, &data, info)
		})
		run.Steps[i].Attempts++
		if err != nil {
			run.Steps[i].Status, run.Steps[i].Error, run.Status = "failed", err.Error(), "failed"
			save()
			log.Fatalf("step %s failed: %v", s.name, err)
		}
		if ran {
			fmt.Printf("step %s: effect ran: %s\n", s.name, result)
		} else {
			fmt.Printf("step %s: effect already recorded: %s\n", s.name, result)
		}
		if *crashAfter == s.name {
			fmt.Printf("crashing after %s\n", s.name)
			os.Exit(137)
		}
		switch s.name {
		case "plan":
			data.Plan = result
		case "workspace":
			data.WorkspaceID = result
		case "welcome":
			data.WelcomeSent = true
		}
		if err := run.State.Set(data); err != nil {
			log.Fatal(err)
		}
		run.Steps[i].Status, run.Steps[i].Result = "done", result
		if i+1 < len(steps) {
			run.State.Stage = steps[i+1].name
		} else {
			run.State.Stage = ""
		}
		save()
	}
	run.Status = "done"
	save()
	fmt.Printf("run %s done\n", run.ID)
}
