// CheckpointStore: one logical checkpoint per run on stepwell's append-only checkpoint log,
// ordered by timestamps that never depend on clocks agreeing.
package dev.stepwell;

import com.google.protobuf.ByteString;
import dev.stepwell.v1.Checkpoint;
import dev.stepwell.v1.CheckpointRequest;
import dev.stepwell.v1.CheckpointResponse;
import java.nio.charset.StandardCharsets;
import java.time.Clock;
import java.time.Instant;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Objects;
import java.util.Optional;

/**
 * One logical checkpoint per run, on stepwell's checkpoint log: each {@link #save} appends a newer
 * version (the run is a stepwell turn, the step its phase), {@link #load} reads the newest, and
 * {@link #history} every version, oldest first.
 *
 * <pre>{@code
 * try (StepwellClient client = StepwellClient.connect("127.0.0.1:50051")) {
 *   CheckpointStore store = new CheckpointStore(client.withNamespace("orders"));
 *   Optional<RunCheckpoint> last = store.load("run-1");      // resume from here, if present
 *   store.save("run-1", "charge", "{\"done\":[\"fetch\",\"charge\"]}");
 *   store.complete("run-1", "receipt", "{\"done\":[\"fetch\",\"charge\",\"receipt\"]}");
 * }
 * }</pre>
 *
 * <p><b>Ordering never depends on clocks agreeing.</b> Versions are ordered by their timestamps,
 * which the store reads from its {@link Clock}. Workers' clocks disagree, so the store keeps, per
 * run, the newest timestamp it has seen (by its loads, saves and histories), and stamps a save
 * with the clock's instant or one nanosecond after that newest timestamp, whichever is later.
 * Before its first save of a run it has not seen, it reads the run's newest stored checkpoint
 * once (one Restore, newest first, page size 1). So a worker whose clock is behind the one that
 * saved before it still appends the newest version, and two saves at one clock instant are still
 * two versions, in the order they were made. This assumes that each worker goes through its
 * store for the runs it resumes, and that two workers do not save one run at the same time.
 *
 * <p>The state is a JSON document given as a string; the store does not parse it, so any JSON
 * library fits. It is sent as UTF-8.
 *
 * <p>Calls go through the given client, with its namespace, deadline and retries: a save retried
 * after a lost answer resends the very same checkpoint, which the sidecar stores once. Failures are
 * thrown as {@link StepwellException}s. A store is safe for use by many threads.
 */
public final class CheckpointStore {
  /** Marks a run seen with no checkpoint stored. */
  private static final Instant NONE = Instant.MIN;

  private final StepwellClient client;
  private final Clock clock;
  /** The newest timestamp seen per run ({@link #NONE}: seen, none stored); guarded by itself. */
  private final Map<String, Instant> newest = new HashMap<>();

  /**
   * A store of {@code client}'s namespace that stamps saves from {@link Clock#systemUTC()}.
   *
   * @param client the client the store calls through (its namespace holds the runs)
   */
  public CheckpointStore(StepwellClient client) {
    this(client, Clock.systemUTC());
  }

  /**
   * A store of {@code client}'s namespace that stamps saves from {@code clock}, subject to the
   * per-run floor described in the class documentation.
   *
   * @param client the client the store calls through (its namespace holds the runs)
   * @param clock the clock saves are stamped from
   */
  public CheckpointStore(StepwellClient client, Clock clock) {
    this.client = Objects.requireNonNull(client, "client");
    this.clock = Objects.requireNonNull(clock, "clock");
  }

  /**
   * The client the store calls through.
   *
   * @return the client given to the constructor
   */
  public StepwellClient client() {
    return client;
  }

  /**
   * The clock saves are stamped from.
   *
   * @return the clock given to the constructor, or {@link Clock#systemUTC()}
   */
  public Clock clock() {
    return clock;
  }

  /**
   * Saves {@code stateJson} as the newest version of the run's checkpoint, at {@code step}.
   *
   * @param runId the run
   * @param step the step the run is at (stored as the checkpoint's phase)
   * @param stateJson the run's state, a non-empty JSON document
   * @return the version saved
   * @throws IllegalArgumentException when an argument is empty
   * @throws StepwellException when the sidecar refuses the save or cannot be reached
   */
  public RunCheckpoint save(String runId, String step, String stateJson) {
    return append(runId, step, stateJson, false);
  }

  /**
   * Saves {@code stateJson} as the newest version, as {@link #save} does, and marks the run
   * completed: the version is terminal, and stepwell lists the run among the finished ones.
   *
   * @param runId the run
   * @param step the run's last step (stored as the checkpoint's phase)
   * @param stateJson the run's final state, a non-empty JSON document
   * @return the version saved
   * @throws IllegalArgumentException when an argument is empty
   * @throws StepwellException when the sidecar refuses the save or cannot be reached
   */
  public RunCheckpoint complete(String runId, String step, String stateJson) {
    return append(runId, step, stateJson, true);
  }

  /**
   * The newest version of the run's checkpoint. Later saves of the run through this store are
   * stamped after it.
   *
   * @param runId the run
   * @return the newest version, or empty when the run has none
   * @throws StepwellException when the sidecar cannot be reached
   */
  public Optional<RunCheckpoint> load(String runId) {
    requireText(runId, "runId");
    Optional<Checkpoint> latest = client.latest(runId);
    seen(runId, latest.map(c -> StepwellClient.instant(c.getTimestamp())).orElse(NONE));
    return latest.map(RunCheckpoint::of);
  }

  /**
   * Every version of the run's checkpoint, oldest first. Later saves of the run through this store
   * are stamped after the newest of them.
   *
   * @param runId the run
   * @return the versions, oldest first; empty when the run has none
   * @throws StepwellException when the sidecar cannot be reached
   */
  public List<RunCheckpoint> history(String runId) {
    requireText(runId, "runId");
    List<Checkpoint> all = client.restore(runId);
    seen(
        runId,
        all.isEmpty() ? NONE : StepwellClient.instant(all.get(all.size() - 1).getTimestamp()));
    List<RunCheckpoint> out = new ArrayList<>(all.size());
    for (Checkpoint c : all) out.add(RunCheckpoint.of(c));
    return List.copyOf(out);
  }

  /**
   * Deletes the run: every version of its checkpoint.
   *
   * @param runId the run
   * @return how many versions were deleted
   * @throws StepwellException when the sidecar refuses or cannot be reached
   */
  public long delete(String runId) {
    requireText(runId, "runId");
    long deleted = client.deleteTurn(runId);
    synchronized (newest) {
      newest.remove(runId);
    }
    return deleted;
  }

  private RunCheckpoint append(String runId, String step, String stateJson, boolean terminal) {
    requireText(runId, "runId");
    requireText(step, "step");
    requireText(stateJson, "stateJson");
    boolean known;
    synchronized (newest) {
      known = newest.containsKey(runId);
    }
    if (!known) {
      // Another worker, whose clock may be ahead of ours, may have saved this run: stamp after
      // its newest checkpoint, read once.
      seen(
          runId, client.latest(runId).map(c -> StepwellClient.instant(c.getTimestamp())).orElse(NONE));
    }
    CheckpointResponse response =
        client.checkpoint(
            CheckpointRequest.newBuilder()
                .setTurnId(runId)
                .setPhase(step)
                .setState(ByteString.copyFrom(stateJson, StandardCharsets.UTF_8))
                .setTimestamp(StepwellClient.timestamp(stamp(runId)))
                .setTerminal(terminal)
                .build());
    return RunCheckpoint.of(response.getCheckpoint());
  }

  /** The timestamp of the next save of {@code runId}: the clock, but after every one seen. */
  private Instant stamp(String runId) {
    Instant now = clock.instant();
    synchronized (newest) {
      Instant floor = newest.getOrDefault(runId, NONE);
      Instant t = floor == NONE || now.isAfter(floor) ? now : floor.plusNanos(1);
      newest.put(runId, t);
      return t;
    }
  }

  /** Records that {@code runId} has a checkpoint at {@code t} ({@link #NONE}: has none). */
  private void seen(String runId, Instant t) {
    synchronized (newest) {
      Instant was = newest.get(runId);
      if (was == null || t.isAfter(was)) newest.put(runId, t);
    }
  }

  private static void requireText(String value, String name) {
    if (value == null || value.isBlank()) {
      throw new IllegalArgumentException("stepwell: " + name + " must not be empty");
    }
  }
}
