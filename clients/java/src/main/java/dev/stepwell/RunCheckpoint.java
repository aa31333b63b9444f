// RunCheckpoint: one saved version of a run's checkpoint, as CheckpointStore returns it.
package dev.stepwell;

import dev.stepwell.v1.Checkpoint;
import java.nio.charset.StandardCharsets;
import java.time.Instant;
import java.util.Objects;

/**
 * One saved version of a run's checkpoint, as {@link CheckpointStore} saves and loads it.
 *
 * @param runId the run (the stepwell turn id)
 * @param step the step the run was at when this version was saved (the stepwell phase)
 * @param stateJson the state as saved: a JSON document, UTF-8 decoded
 * @param timestamp the checkpoint's timestamp, which orders a run's versions
 * @param terminal whether the run was completed by this version ({@link CheckpointStore#complete})
 */
public record RunCheckpoint(
    String runId, String step, String stateJson, Instant timestamp, boolean terminal) {

  /**
   * A version of a run's checkpoint; no component may be null.
   *
   * @param runId the run (the stepwell turn id)
   * @param step the step the run was at (the stepwell phase)
   * @param stateJson the state: a JSON document
   * @param timestamp the checkpoint's timestamp
   * @param terminal whether the version completed the run
   * @throws NullPointerException when a component is null
   */
  public RunCheckpoint {
    Objects.requireNonNull(runId, "runId");
    Objects.requireNonNull(step, "step");
    Objects.requireNonNull(stateJson, "stateJson");
    Objects.requireNonNull(timestamp, "timestamp");
  }

  /** The version a stored checkpoint describes. */
  static RunCheckpoint of(Checkpoint c) {
    return new RunCheckpoint(
        c.getTurnId(),
        c.getPhase(),
        c.getState().toString(StandardCharsets.UTF_8),
        StepwellClient.instant(c.getTimestamp()),
        c.getTerminal());
  }
}
