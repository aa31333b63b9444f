package dev.stepwell;

import static org.junit.jupiter.api.Assertions.*;

import com.fasterxml.jackson.core.type.TypeReference;
import dev.stepwell.v1.BeginOutcome;
import dev.stepwell.v1.BeginRequest;
import dev.stepwell.v1.BeginResponse;
import dev.stepwell.v1.Checkpoint;
import dev.stepwell.v1.CheckpointRequest;
import dev.stepwell.v1.CheckpointResponse;
import dev.stepwell.v1.GetResponse;
import dev.stepwell.v1.RecordState;
import dev.stepwell.v1.RestoreRequest;
import dev.stepwell.v1.TurnStatus;
import dev.stepwell.v1.TurnSummary;
import io.grpc.Status;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.time.Instant;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.Optional;
import java.util.UUID;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;
import java.util.concurrent.atomic.AtomicInteger;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.extension.ExtendWith;

@ExtendWith(Sidecar.Extension.class)
class ClientTest {
  private static final Instant T0 = Instant.parse("2026-01-01T00:00:00.123456789Z");
  private StepwellClient root;
  private StepwellClient c;

  @BeforeEach
  void open() {
    root = Sidecar.client();
    c = root.withNamespace("java-" + UUID.randomUUID().toString().substring(0, 12));
  }

  @AfterEach
  void close() {
    root.close();
  }

  private static String json(com.google.protobuf.ByteString b) {
    return b.toStringUtf8();
  }

  @Test
  void checkpointRestoreLatestListDelete() {
    CheckpointResponse r = c.checkpoint("t1", "started", Map.of("n", 1), T0, false);
    assertTrue(r.getInserted());
    assertEquals(T0, StepwellClient.instant(r.getCheckpoint().getTimestamp()));
    assertFalse(c.checkpoint("t1", "started", Map.of("n", 1), T0, false).getInserted());
    CheckpointConflictException conflict =
        assertThrows(
            CheckpointConflictException.class,
            () -> c.checkpoint("t1", "started", Map.of("n", 2), T0, false));
    assertEquals(Status.Code.ALREADY_EXISTS, conflict.code());
    assertEquals("CHECKPOINT_CONFLICT", conflict.reason());
    c.checkpoint("t1", "settled", Map.of("n", 3), T0.plusSeconds(1), true);
    c.checkpoint("t2", "started", "{\"raw\":true}".getBytes(StandardCharsets.UTF_8), T0, false);

    List<Checkpoint> all = c.restore("t1");
    assertEquals(List.of("started", "settled"), all.stream().map(Checkpoint::getPhase).toList());
    assertEquals("{\"n\":1}", json(all.get(0).getState()));
    assertEquals("settled", c.latest("t1").orElseThrow().getPhase());
    assertTrue(c.latest("nope").isEmpty());
    assertEquals("{\"raw\":true}", json(c.latest("t2").orElseThrow().getState()));

    List<TurnSummary> open = c.listTurns(TurnStatus.TURN_STATUS_OPEN);
    assertEquals(List.of("t2"), open.stream().map(TurnSummary::getTurnId).toList());
    List<TurnSummary> any = c.listTurns(TurnStatus.TURN_STATUS_ANY);
    assertEquals(2, any.size());
    assertEquals(2, any.get(0).getCheckpointCount());

    assertEquals(2, c.deleteTurn("t1"));
    assertEquals(0, c.deleteTurn("t1"));
    assertTrue(c.restore("t1").isEmpty());
  }

  @Test
  void latestAndRestoreDecodeTheStateAsCheckpointEncodedIt() {
    record Step(String name, int n) {}
    c.checkpoint("typed", "fetch", new Step("fetch", 1), T0, false);
    c.checkpoint("typed", "charge", new Step("charge", 2), T0.plusSeconds(1), false);
    assertEquals(Optional.of(new Step("charge", 2)), c.latest("typed", Step.class));
    assertEquals(
        List.of(new Step("fetch", 1), new Step("charge", 2)), c.restore("typed", Step.class));
    TypeReference<Map<String, Object>> map = new TypeReference<>() {};
    assertEquals(Optional.of(Map.of("name", "charge", "n", 2)), c.latest("typed", map));
    assertEquals(Map.of("name", "fetch", "n", 1), c.restore("typed", map).get(0));
    assertEquals(new Step("fetch", 1), StepwellClient.state(c.restore("typed").get(0), Step.class));
    // A String state is JSON too, and so is a List; no checkpoint is an empty Optional.
    c.checkpoint("text", "said", "hello");
    assertEquals(Optional.of("hello"), c.latest("text", String.class));
    c.checkpoint("list", "done", List.of("fetch", "charge"));
    assertEquals(
        Optional.of(List.of("fetch", "charge")), c.latest("list", new TypeReference<List<String>>() {}));
    assertEquals(Optional.empty(), c.latest("none", Step.class));
    assertEquals(List.of(), c.restore("none", Step.class));
    // Bytes sent as they are (JSON, but no JSON of the type) are refused by name.
    c.checkpoint("raw", "x", "[1, 2]".getBytes(StandardCharsets.UTF_8));
    IllegalStateException e =
        assertThrows(IllegalStateException.class, () -> c.latest("raw", Step.class));
    assertTrue(e.getMessage().contains("raw/x"), e.getMessage());
  }

  @Test
  void restorePagesThroughEveryCheckpoint() {
    for (int i = 0; i < 25; i++) c.checkpoint("p", "step", Map.of("i", i), T0.plusMillis(i), false);
    assertEquals(
        10, c.restore(RestoreRequest.newBuilder().setTurnId("p").setPageSize(10).build()).getCheckpointsCount());
    assertEquals(25, c.restore("p").size());
  }

  @Test
  void restorePagesThroughATurnLargerThanOneMessage() {
    // Six states of about 900 KB, 5.4 MB in all, more than the 4 MiB a gRPC
    // client accepts in one message: the sidecar cuts each page to fit, and
    // restore follows the pages with the default limits.
    List<String> states = new ArrayList<>();
    for (int i = 0; i < 6; i++) {
      String state = "\"" + i + "x".repeat(900_000) + "\"";
      states.add(state);
      c.checkpoint("big", "p" + i, state.getBytes(StandardCharsets.UTF_8), T0.plusSeconds(i), false);
    }
    var first = c.restore(RestoreRequest.newBuilder().setTurnId("big").build());
    assertTrue(first.getCheckpointsCount() >= 1 && first.getCheckpointsCount() < 6, first.getCheckpointsCount() + " on the first page");
    assertFalse(first.getNextPageToken().isEmpty());
    List<Checkpoint> all = c.restore("big");
    assertEquals(List.of("p0", "p1", "p2", "p3", "p4", "p5"), all.stream().map(Checkpoint::getPhase).toList());
    assertEquals(states, all.stream().map(cp -> json(cp.getState())).toList());
  }

  @Test
  void workflowVersionMismatchCarriesBothVersions() {
    c.checkpoint(
        CheckpointRequest.newBuilder()
            .setTurnId("v")
            .setPhase("started")
            .setState(com.google.protobuf.ByteString.copyFromUtf8("{}"))
            .setTimestamp(StepwellClient.timestamp(T0))
            .setWorkflowVersion("1.3.0")
            .build());
    WorkflowVersionMismatchException e =
        assertThrows(
            WorkflowVersionMismatchException.class,
            () ->
                c.restore(
                    RestoreRequest.newBuilder().setTurnId("v").setExpectWorkflowVersion("2.0.0").build()));
    assertEquals(Status.Code.FAILED_PRECONDITION, e.code());
    assertEquals("1.3.0", e.recordedVersion());
    assertEquals("2.0.0", e.expectedVersion());
  }

  @Test
  void invalidArgumentNamesTheField() {
    InvalidArgumentException e =
        assertThrows(InvalidArgumentException.class, () -> c.checkpoint("t", "has space", Map.of()));
    assertEquals("phase", e.field());
    assertEquals("FIELD_MALFORMED", e.reason());
    assertFalse(e.violations().isEmpty());
  }

  @Test
  void idempotencyLifeCycle() {
    BeginResponse b = c.begin("k/charge", Duration.ofSeconds(5));
    assertEquals(BeginOutcome.BEGIN_OUTCOME_ACQUIRED, b.getOutcome());
    assertEquals(1, b.getAttempt());
    assertEquals(BeginOutcome.BEGIN_OUTCOME_IN_PROGRESS, c.begin("k/charge").getOutcome());
    assertTrue(c.extend("k/charge", b.getLeaseToken(), Duration.ofSeconds(10)).hasLeaseExpiresAt());
    assertEquals(RecordState.RECORD_STATE_IN_PROGRESS, c.get("k/charge").getState());
    assertThrows(
        LeaseLostException.class,
        () -> c.complete("k/charge", b.getLeaseToken() + 1000, "x".getBytes(StandardCharsets.UTF_8)));
    c.complete("k/charge", b.getLeaseToken(), "\"ok\"".getBytes(StandardCharsets.UTF_8));
    c.complete("k/charge", b.getLeaseToken(), "\"ok\"".getBytes(StandardCharsets.UTF_8)); // repeat is OK
    assertThrows(
        StepwellException.class,
        () -> c.complete("k/charge", b.getLeaseToken(), "\"other\"".getBytes(StandardCharsets.UTF_8)));
    BeginResponse done = c.begin("k/charge");
    assertEquals(BeginOutcome.BEGIN_OUTCOME_COMPLETED, done.getOutcome());
    assertEquals("\"ok\"", done.getResult().toStringUtf8());
    GetResponse g = c.get("k/charge");
    assertEquals(RecordState.RECORD_STATE_COMPLETED, g.getState());
    assertThrows(NotAcquiredException.class, () -> c.extend("k/charge", b.getLeaseToken(), null));

    BeginResponse r = c.begin("k/email");
    assertEquals(RecordState.RECORD_STATE_RELEASED, c.release("k/email", r.getLeaseToken(), "try again", false).getState());
    BeginResponse r2 = c.begin("k/email");
    assertEquals(2, r2.getAttempt());
    assertTrue(r2.getLeaseToken() > r.getLeaseToken());
    assertEquals(RecordState.RECORD_STATE_FAILED, c.release("k/email", r2.getLeaseToken(), "card declined", true).getState());
    assertEquals("card declined", c.begin("k/email").getError());
    assertThrows(NotAcquiredException.class, () -> c.release("k/email", r2.getLeaseToken(), "", false));

    KeyNotFoundException nf = assertThrows(KeyNotFoundException.class, () -> c.get("k/none"));
    assertEquals(Status.Code.NOT_FOUND, nf.code());

    c.begin(BeginRequest.newBuilder()
        .setKey("k/fp").setFingerprint(com.google.protobuf.ByteString.copyFromUtf8("a")).build());
    KeyReusedException kr =
        assertThrows(
            KeyReusedException.class,
            () -> c.begin(BeginRequest.newBuilder()
                .setKey("k/fp").setFingerprint(com.google.protobuf.ByteString.copyFromUtf8("b")).build()));
    assertEquals("KEY_REUSED", kr.reason());
  }

  @Test
  void deadlineIsApplied() {
    StepwellException e =
        assertThrows(
            StepwellException.class,
            () -> c.withRetry(RetryPolicy.NONE).withDeadline(Duration.ofNanos(1)).get("k"));
    assertEquals(Status.Code.DEADLINE_EXCEEDED, e.code());
  }

  @Test
  void unavailableIsRetriedThenThrown() throws Exception {
    RetryPolicy fast =
        new RetryPolicy(3, Duration.ofMillis(10), Duration.ofMillis(20), 2.0, 0.0,
            RetryPolicy.DEFAULT.retryable());
    AtomicInteger attempts = new AtomicInteger();
    io.grpc.ClientInterceptor counting =
        new io.grpc.ClientInterceptor() {
          @Override
          public <Q, R> io.grpc.ClientCall<Q, R> interceptCall(
              io.grpc.MethodDescriptor<Q, R> method, io.grpc.CallOptions options, io.grpc.Channel next) {
            attempts.incrementAndGet();
            return next.newCall(method, options);
          }
        };
    io.grpc.ManagedChannel channel =
        io.grpc.netty.shaded.io.grpc.netty.NettyChannelBuilder.forTarget("127.0.0.1:" + Sidecar.freePort())
            .usePlaintext()
            .intercept(counting)
            .build();
    try (StepwellClient dead = StepwellClient.fromChannel(channel)) {
      assertThrows(UnavailableException.class, () -> dead.withRetry(fast).get("k"));
      assertEquals(3, attempts.get(), "every attempt the policy allows was made");
    }
  }

  @Test
  void onceRunsOnceAndReturnsTheRecordedResult() {
    AtomicInteger calls = new AtomicInteger();
    Map<String, Object> first = c.once("o/1", () -> {
      calls.incrementAndGet();
      return Map.of("charge", "ch_1", "amount", 100);
    });
    Map<String, Object> second = c.once("o/1", () -> {
      calls.incrementAndGet();
      return Map.of("charge", "ch_2");
    });
    assertEquals(1, calls.get());
    assertEquals(first, second);
    assertEquals("ch_1", second.get("charge"));
    record Receipt(String id, int amount) {}
    Receipt typed = c.once("o/2", Receipt.class, () -> new Receipt("r", 7));
    assertEquals(new Receipt("r", 7), c.once("o/2", Receipt.class, () -> new Receipt("x", 0)));
    assertEquals(new Receipt("r", 7), typed);
  }

  @Test
  void onceReleasesWhenTheOperationThrows() {
    assertThrows(IllegalStateException.class, () -> c.once("o/fail", () -> {
      throw new IllegalStateException("boom");
    }));
    assertEquals(RecordState.RECORD_STATE_RELEASED, c.get("o/fail").getState());
    Integer v = c.once("o/fail", (OnceContext ctx) -> ctx.attempt());
    assertEquals(2, v);
  }

  @Test
  void onceReportsPreviousLeaseExpiredAndFailed() throws Exception {
    BeginResponse b = c.begin("o/expired", Duration.ofMillis(200));
    assertEquals(BeginOutcome.BEGIN_OUTCOME_ACQUIRED, b.getOutcome());
    Boolean expired =
        c.once("o/expired", Boolean.class,
            OnceOptions.defaults().waitTimeout(Duration.ofSeconds(10)),
            OnceContext::previousLeaseExpired);
    assertTrue(expired);

    BeginResponse f = c.begin("o/failed");
    c.release("o/failed", f.getLeaseToken(), "declined", true);
    OperationFailedException e =
        assertThrows(OperationFailedException.class, () -> c.once("o/failed", () -> 1));
    assertEquals("declined", e.statusMessage());

    c.begin("o/held", Duration.ofSeconds(30));
    assertThrows(OnceTimeoutException.class, () -> c.once("o/held", Integer.class,
        OnceOptions.defaults().waitTimeout(Duration.ofMillis(200)), ctx -> 1));
  }

  @Test
  void onceHeartbeatKeepsTheLease() {
    String v = c.once("o/long", String.class,
        OnceOptions.defaults().lease(Duration.ofMillis(300)).heartbeat(Duration.ofMillis(50)),
        ctx -> {
          try {
            Thread.sleep(900);
          } catch (InterruptedException e) {
            throw new RuntimeException(e);
          }
          assertFalse(ctx.leaseLost());
          return "done";
        });
    assertEquals("done", v);
    assertEquals(1, c.get("o/long").getAttempt());
  }

  @Test
  void onceUnderTwentyConcurrentCallers() throws Exception {
    AtomicInteger calls = new AtomicInteger();
    ExecutorService pool = Executors.newFixedThreadPool(20);
    CountDownLatch go = new CountDownLatch(1);
    try {
      List<Future<Object>> results = new ArrayList<>();
      for (int i = 0; i < 20; i++) {
        results.add(pool.submit(() -> {
          go.await();
          return c.once("o/concurrent", () -> {
            calls.incrementAndGet();
            try {
              Thread.sleep(200);
            } catch (InterruptedException e) {
              throw new RuntimeException(e);
            }
            return Map.of("v", 42);
          });
        }));
      }
      go.countDown();
      for (Future<Object> f : results) assertEquals(Map.of("v", 42), f.get());
    } finally {
      pool.shutdownNow();
    }
    assertEquals(1, calls.get());
  }

  @Test
  void unixSocket() throws Exception {
    Path dir = Files.createTempDirectory("stepwell-sock-");
    String target = "unix:" + dir.resolve("s.sock");
    Sidecar s = Sidecar.start(target);
    try (StepwellClient u = StepwellClient.connect(target)) {
      StepwellClient n = u.withNamespace("java-unix");
      assertTrue(n.checkpoint("u", "p", Map.of("unix", true), T0, false).getInserted());
      assertEquals("{\"unix\":true}", n.latest("u").orElseThrow().getState().toStringUtf8());
    } finally {
      s.close();
    }
  }
}
