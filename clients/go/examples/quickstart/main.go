// Command quickstart is a first program on the client: it saves a
// checkpoint and restores it. The README's "Install" copies it into a fresh
// module, so that something imports the client before go mod tidy runs.
//
//	go run . 127.0.0.1:50051
package main

import (
	"context"
	"fmt"
	"log"
	"os"
	"time"

	stepwell "stepwell.dev/client"
	pb "stepwell.dev/client/gen/stepwell/v1"
)

func main() {
	target := "127.0.0.1:50051"
	if len(os.Args) > 1 {
		target = os.Args[1]
	}
	c, err := stepwell.Dial(target, stepwell.WithNamespace("quickstart"))
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()
	ctx := context.Background()
	state := []byte(`{"stage":"plan"}`)
	if _, err := c.Checkpoint(ctx, &pb.CheckpointRequest{
		TurnId: "run-1", Phase: "plan", State: state, Timestamp: stepwell.Timestamp(time.Now()),
	}); err != nil {
		log.Fatal(err)
	}
	res, err := c.Restore(ctx, &pb.RestoreRequest{TurnId: "run-1", NewestFirst: true, PageSize: 1})
	if err != nil {
		log.Fatal(err)
	}
	if len(res.GetCheckpoints()) != 1 || string(res.GetCheckpoints()[0].GetState()) != string(state) {
		log.Fatalf("restore returned %v", res.GetCheckpoints())
	}
	fmt.Println("checkpoint and restore ok")
}
