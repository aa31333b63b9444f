// CheckpointStoreTest: the checkpoint adapter against a live sidecar, skewed and stopped clocks included.
package dev.stepwell;

import static org.junit.jupiter.api.Assertions.*;

import dev.stepwell.v1.TurnStatus;
import dev.stepwell.v1.TurnSummary;
import java.time.Clock;
import java.time.Instant;
import java.time.ZoneOffset;
import java.util.ArrayList;
import java.util.HashSet;
import java.util.List;
import java.util.Optional;
import java.util.Set;
import java.util.UUID;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.extension.ExtendWith;

/**
 * {@link CheckpointStore} against the shared sidecar. Workers are separate stores (separate
 * clients, as separate processes would be) whose injected clocks are an hour or more apart, far
 * more than the seconds between their saves.
 */
@ExtendWith(Sidecar.Extension.class)
class CheckpointStoreTest {
  private static final Instant AHEAD = Instant.parse("2026-06-01T11:00:00Z");
  private static final Instant BEHIND = AHEAD.minusSeconds(3600);

  private final List<StepwellClient> clients = new ArrayList<>();
  private String ns;

  @BeforeEach
  void namespace() {
    ns = "java-cs-" + UUID.randomUUID().toString().substring(0, 12);
  }

  @AfterEach
  void close() {
    for (StepwellClient c : clients) c.close();
  }

  /** A worker: a store with its own client in this test's namespace, stamping from {@code clock}. */
  private CheckpointStore worker(Clock clock) {
    StepwellClient c = Sidecar.client();
    clients.add(c);
    return new CheckpointStore(c.withNamespace(ns), clock);
  }

  private static List<String> steps(List<RunCheckpoint> history) {
    return history.stream().map(RunCheckpoint::step).toList();
  }

  @Test
  void workersAnHourApartResumeAcrossEachOther() {
    SetClock aheadClock = new SetClock(AHEAD);
    SetClock behindClock = new SetClock(BEHIND);
    CheckpointStore ahead = worker(aheadClock);
    CheckpointStore behind = worker(behindClock);

    ahead.save("run", "fetch", "{\"done\":1}");
    aheadClock.set(AHEAD.plusSeconds(1));
    ahead.save("run", "plan", "{\"done\":2}");

    behindClock.set(BEHIND.plusSeconds(2));
    assertEquals("plan", behind.load("run").orElseThrow().step());
    behindClock.set(BEHIND.plusSeconds(3));
    RunCheckpoint charge = behind.save("run", "charge", "{\"done\":3}");

    aheadClock.set(AHEAD.plusSeconds(4));
    RunCheckpoint loaded = ahead.load("run").orElseThrow();
    assertEquals("charge", loaded.step());
    assertEquals("{\"done\":3}", loaded.stateJson());
    assertEquals(AHEAD.plusSeconds(1).plusNanos(1), charge.timestamp());
    aheadClock.set(AHEAD.plusSeconds(5));
    ahead.save("run", "email", "{\"done\":4}");

    behindClock.set(BEHIND.plusSeconds(6));
    assertEquals("email", behind.load("run").orElseThrow().step());
    behind.save("run", "report", "{\"done\":5}");

    assertEquals("report", ahead.load("run").orElseThrow().step());
    List<RunCheckpoint> history = behind.history("run");
    assertEquals(List.of("fetch", "plan", "charge", "email", "report"), steps(history));
    for (int i = 1; i < history.size(); i++) {
      assertTrue(history.get(i).timestamp().isAfter(history.get(i - 1).timestamp()));
    }
  }

  @Test
  void saveWithoutLoadBehindANewerStoredCheckpoint() {
    CheckpointStore ahead = worker(Clock.fixed(AHEAD, ZoneOffset.UTC));
    RunCheckpoint first = ahead.save("run", "fetch", "{\"done\":1}");
    assertEquals(AHEAD, first.timestamp());

    // A worker two hours behind that never loaded the run saves straight away.
    CheckpointStore fresh = worker(Clock.fixed(BEHIND.minusSeconds(3600), ZoneOffset.UTC));
    RunCheckpoint second = fresh.save("run", "plan", "{\"done\":2}");

    RunCheckpoint newest = worker(Clock.systemUTC()).load("run").orElseThrow();
    assertEquals("plan", newest.step());
    assertEquals("{\"done\":2}", newest.stateJson());
    assertEquals(List.of("fetch", "plan"), steps(ahead.history("run")));
    assertEquals(AHEAD.plusNanos(1), second.timestamp());
  }

  @Test
  void aStoppedClockStillOrdersTwoSaves() {
    CheckpointStore w = worker(Clock.fixed(AHEAD, ZoneOffset.UTC));
    RunCheckpoint a = w.save("run", "fetch", "{\"done\":1}");
    RunCheckpoint b = w.save("run", "plan", "{\"done\":2}");
    assertEquals("plan", w.load("run").orElseThrow().step());
    // The same step twice at one instant: two versions, not one deduplicated (or conflicting) one.
    w.save("run", "poll", "{\"polls\":1}");
    w.save("run", "poll", "{\"polls\":2}");
    w.save("run", "poll", "{\"polls\":2}");
    assertEquals("{\"polls\":2}", w.load("run").orElseThrow().stateJson());
    assertEquals(List.of("fetch", "plan", "poll", "poll", "poll"), steps(w.history("run")));
    assertEquals(AHEAD, a.timestamp());
    assertEquals(AHEAD.plusNanos(1), b.timestamp());
  }

  @Test
  void concurrentSavesOfOneRunWithAStoppedClockAreAllKept() throws Exception {
    CheckpointStore w = worker(Clock.fixed(AHEAD, ZoneOffset.UTC));
    int threads = 8;
    int each = 10;
    ExecutorService pool = Executors.newFixedThreadPool(threads);
    CountDownLatch go = new CountDownLatch(1);
    try {
      List<Future<List<RunCheckpoint>>> futures = new ArrayList<>();
      for (int t = 0; t < threads; t++) {
        int thread = t;
        futures.add(
            pool.submit(
                () -> {
                  go.await();
                  List<RunCheckpoint> out = new ArrayList<>();
                  for (int i = 0; i < each; i++) {
                    out.add(w.save("run", "s" + thread + "-" + i, "{\"i\":" + i + "}"));
                  }
                  return out;
                }));
      }
      go.countDown();
      Set<Instant> stamps = new HashSet<>();
      for (Future<List<RunCheckpoint>> f : futures) {
        for (RunCheckpoint c : f.get()) stamps.add(c.timestamp());
      }
      assertEquals(threads * each, stamps.size(), "every save has its own timestamp");
    } finally {
      pool.shutdownNow();
    }
    assertEquals(threads * each, w.history("run").size());
  }

  @Test
  void loadOfARunWithoutCheckpointsIsEmpty() {
    assertEquals(Optional.empty(), worker(Clock.systemUTC()).load("nothing-here"));
    assertEquals(List.of(), worker(Clock.systemUTC()).history("nothing-here"));
  }

  @Test
  void defaultClockIsTheSystemClock() {
    StepwellClient c = Sidecar.client();
    clients.add(c);
    CheckpointStore store = new CheckpointStore(c.withNamespace(ns));
    assertEquals(Clock.systemUTC(), store.clock());
    Instant before = Instant.now();
    RunCheckpoint saved = store.save("run", "fetch", "[1,2]");
    Instant after = Instant.now();
    assertFalse(saved.timestamp().isBefore(before), saved.timestamp() + " before " + before);
    assertFalse(saved.timestamp().isAfter(after), saved.timestamp() + " after " + after);
    assertEquals("run", saved.runId());
    assertEquals("[1,2]", saved.stateJson());
    assertFalse(saved.terminal());
  }

  @Test
  void completeIsTerminalAndDeleteRemovesEveryVersion() {
    StepwellClient c = Sidecar.client();
    clients.add(c);
    StepwellClient n = c.withNamespace(ns);
    CheckpointStore w = new CheckpointStore(n, Clock.fixed(AHEAD, ZoneOffset.UTC));
    w.save("run", "fetch", "{}");
    RunCheckpoint done = w.complete("run", "receipt", "{\"ok\":true}");
    assertTrue(done.terminal());
    assertTrue(w.load("run").orElseThrow().terminal());
    List<TurnSummary> finished = n.listTurns(TurnStatus.TURN_STATUS_TERMINAL);
    assertEquals(List.of("run"), finished.stream().map(TurnSummary::getTurnId).toList());

    assertEquals(2, w.delete("run"));
    assertTrue(w.load("run").isEmpty());
    assertEquals(0, w.delete("run"));
  }

  @Test
  void emptyArgumentsAreRefusedAndStoreNothing() {
    CheckpointStore w = worker(Clock.systemUTC());
    assertThrows(IllegalArgumentException.class, () -> w.save("run", "fetch", ""));
    assertThrows(IllegalArgumentException.class, () -> w.save("run", "fetch", "  "));
    assertThrows(IllegalArgumentException.class, () -> w.save("run", "fetch", null));
    assertThrows(IllegalArgumentException.class, () -> w.save("run", "", "{}"));
    assertThrows(IllegalArgumentException.class, () -> w.save("", "fetch", "{}"));
    assertThrows(IllegalArgumentException.class, () -> w.load(""));
    assertTrue(w.history("run").isEmpty());
  }

  @Test
  void failuresAreStepwellExceptions() {
    StepwellClient c = Sidecar.client();
    clients.add(c);
    // A namespace the sidecar refuses: the save's first read already fails.
    CheckpointStore w = new CheckpointStore(c.withNamespace("NOT a namespace!"), Clock.systemUTC());
    StepwellException e = assertThrows(StepwellException.class, () -> w.save("run", "s", "{}"));
    assertEquals(io.grpc.Status.Code.INVALID_ARGUMENT, e.code());
  }
}
