package dev.stepwell;

import static org.junit.jupiter.api.Assertions.*;

import com.google.protobuf.Any;
import com.google.rpc.ErrorInfo;
import io.grpc.CallOptions;
import io.grpc.Channel;
import io.grpc.ClientCall;
import io.grpc.ClientInterceptor;
import io.grpc.ManagedChannel;
import io.grpc.Metadata;
import io.grpc.MethodDescriptor;
import io.grpc.Status;
import io.grpc.StatusRuntimeException;
import io.grpc.netty.shaded.io.grpc.netty.NettyChannelBuilder;
import io.grpc.protobuf.StatusProto;
import java.time.Duration;
import java.time.Instant;
import java.util.List;
import java.util.Map;
import java.util.OptionalLong;
import java.util.UUID;
import java.util.concurrent.atomic.AtomicInteger;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.extension.ExtendWith;

/**
 * RESOURCE_EXHAUSTED and its three reasons: which exception each becomes and which of them the
 * client retries. OVERLOADED (and a RESOURCE_EXHAUSTED without ErrorInfo) is retried with backoff;
 * MESSAGE_TOO_LARGE and STORE_FULL are thrown after one attempt. The oversized message goes to the
 * real sidecar; the other statuses are built here and answered by an interceptor in place of the
 * RPC, so the client's own retry loop decides.
 */
@ExtendWith(Sidecar.Extension.class)
class ResourceExhaustedTest {
  private static final Instant T0 = Instant.parse("2026-01-01T00:00:00Z");
  /** The sidecar's default --message-bytes-max. */
  private static final long MESSAGE_BYTES_MAX = 4_194_304L;
  /** Five attempts, with backoffs too short to matter. */
  private static final RetryPolicy FAST =
      new RetryPolicy(
          5, Duration.ofMillis(1), Duration.ofMillis(2), 2.0, 0.0, RetryPolicy.DEFAULT.retryable());

  /** A status as the sidecar sends it: {@code code}, with a stepwell ErrorInfo unless reason is null. */
  private static StatusRuntimeException constructed(
      Status.Code code, String reason, Map<String, String> metadata) {
    com.google.rpc.Status.Builder status =
        com.google.rpc.Status.newBuilder().setCode(code.value()).setMessage("constructed");
    if (reason != null) {
      status.addDetails(
          Any.pack(
              ErrorInfo.newBuilder()
                  .setReason(reason)
                  .setDomain(StepwellException.DOMAIN)
                  .putAllMetadata(metadata)
                  .build()));
    }
    return StatusProto.toStatusRuntimeException(status.build());
  }

  private static StatusRuntimeException exhausted(String reason) {
    return constructed(Status.Code.RESOURCE_EXHAUSTED, reason, Map.of());
  }

  /** Counts attempts and passes them on to the sidecar. */
  private static ClientInterceptor counting(AtomicInteger attempts) {
    return new ClientInterceptor() {
      @Override
      public <Q, R> ClientCall<Q, R> interceptCall(
          MethodDescriptor<Q, R> method, CallOptions options, Channel next) {
        attempts.incrementAndGet();
        return next.newCall(method, options);
      }
    };
  }

  /** Counts attempts and answers each with {@code failure}, never reaching the sidecar. */
  private static ClientInterceptor failing(AtomicInteger attempts, StatusRuntimeException failure) {
    return new ClientInterceptor() {
      @Override
      public <Q, R> ClientCall<Q, R> interceptCall(
          MethodDescriptor<Q, R> method, CallOptions options, Channel next) {
        attempts.incrementAndGet();
        return new ClientCall<>() {
          private Listener<R> listener;

          @Override
          public void start(Listener<R> responseListener, Metadata headers) {
            listener = responseListener;
          }

          @Override
          public void request(int numMessages) {}

          @Override
          public void cancel(String message, Throwable cause) {}

          @Override
          public void halfClose() {
            Metadata trailers = failure.getTrailers() == null ? new Metadata() : failure.getTrailers();
            listener.onClose(failure.getStatus(), trailers);
          }

          @Override
          public void sendMessage(Q message) {}
        };
      }
    };
  }

  private static StepwellClient client(ClientInterceptor interceptor) {
    ManagedChannel channel =
        NettyChannelBuilder.forTarget(Sidecar.target()).usePlaintext().intercept(interceptor).build();
    return StepwellClient.fromChannel(channel);
  }

  private static String namespace() {
    return "java-exhausted-" + UUID.randomUUID().toString().substring(0, 8);
  }

  @Test
  void eachReasonMapsToItsException() {
    StepwellException tooLarge =
        StepwellException.from(
            constructed(
                Status.Code.RESOURCE_EXHAUSTED, "MESSAGE_TOO_LARGE", Map.of("limit_bytes", "4194304")));
    MessageTooLargeException mtl = assertInstanceOf(MessageTooLargeException.class, tooLarge);
    assertEquals(Status.Code.RESOURCE_EXHAUSTED, mtl.code());
    assertEquals("MESSAGE_TOO_LARGE", mtl.reason());
    assertEquals(OptionalLong.of(MESSAGE_BYTES_MAX), mtl.limitBytes());
    assertEquals(
        OptionalLong.empty(),
        assertInstanceOf(
                MessageTooLargeException.class,
                StepwellException.from(exhausted("MESSAGE_TOO_LARGE")))
            .limitBytes());

    StepwellException full = StepwellException.from(exhausted("STORE_FULL"));
    assertEquals(StoreFullException.class, full.getClass());
    assertEquals("STORE_FULL", full.reason());
    assertEquals(OverloadedException.class, StepwellException.from(exhausted("OVERLOADED")).getClass());
    // Neither new reason is an OverloadedException: code that retries those must not see them.
    assertFalse(tooLarge instanceof OverloadedException);
    assertFalse(full instanceof OverloadedException);

    // An unknown or missing reason keeps the OverloadedException fallback.
    for (String reason : new String[] {"SOMETHING_NEW", null}) {
      StepwellException e = StepwellException.from(exhausted(reason));
      assertEquals(OverloadedException.class, e.getClass(), "reason " + reason);
      assertEquals(Status.Code.RESOURCE_EXHAUSTED, e.code());
    }
  }

  @Test
  void retryDecisionByReason() {
    Map<String, Boolean> cases =
        Map.of(
            "OVERLOADED", true,
            "", true,
            "MESSAGE_TOO_LARGE", false,
            "STORE_FULL", false,
            "SOMETHING_NEW", false);
    for (Map.Entry<String, Boolean> c : cases.entrySet()) {
      String reason = c.getKey().isEmpty() ? null : c.getKey();
      StepwellException e = StepwellException.from(exhausted(reason));
      assertEquals(c.getValue(), RetryPolicy.DEFAULT.shouldRetry(e, 1), "reason " + reason);
      assertFalse(RetryPolicy.DEFAULT.shouldRetry(e, RetryPolicy.DEFAULT.maxAttempts()));
    }
    for (String reason : new String[] {"STORE_UNAVAILABLE", "NOT_READY", null}) {
      StepwellException e =
          StepwellException.from(constructed(Status.Code.UNAVAILABLE, reason, Map.of()));
      assertInstanceOf(UnavailableException.class, e);
      assertTrue(RetryPolicy.DEFAULT.shouldRetry(e, 1), "UNAVAILABLE " + reason);
    }
  }

  @Test
  void clientAttemptsByReason() {
    record Case(String reason, Class<? extends StepwellException> type, int attempts) {}
    List<Case> cases =
        List.of(
            new Case("OVERLOADED", OverloadedException.class, 5),
            new Case(null, OverloadedException.class, 5),
            new Case("MESSAGE_TOO_LARGE", MessageTooLargeException.class, 1),
            new Case("STORE_FULL", StoreFullException.class, 1));
    for (Case c : cases) {
      AtomicInteger attempts = new AtomicInteger();
      try (StepwellClient root = client(failing(attempts, exhausted(c.reason())))) {
        StepwellClient sw = root.withNamespace(namespace()).withRetry(FAST);
        StepwellException e =
            assertThrows(StepwellException.class, () -> sw.checkpoint("t", "started", Map.of(), T0, false));
        assertEquals(c.type(), e.getClass(), "reason " + c.reason());
        assertEquals(c.attempts(), attempts.get(), "attempts on reason " + c.reason());
      }
    }
  }

  @Test
  void oversizedCheckpointIsMessageTooLargeNotRetriedAndStoresNothing() {
    AtomicInteger attempts = new AtomicInteger();
    try (StepwellClient root = client(counting(attempts))) {
      StepwellClient sw = root.withNamespace(namespace()).withRetry(FAST);
      // A 4.5 MB JSON string: the message is over the limit.
      String state = "x".repeat(4_500_000);
      MessageTooLargeException e =
          assertThrows(
              MessageTooLargeException.class, () -> sw.checkpoint("big", "started", state, T0, false));
      assertEquals(Status.Code.RESOURCE_EXHAUSTED, e.code());
      assertEquals("MESSAGE_TOO_LARGE", e.reason());
      assertEquals(OptionalLong.of(MESSAGE_BYTES_MAX), e.limitBytes());
      assertEquals(1, attempts.get());
      assertTrue(sw.restore("big").isEmpty(), "nothing is stored");
      // The client stays usable: a small checkpoint of the same turn is stored.
      assertTrue(sw.checkpoint("big", "started", Map.of("small", true), T0, false).getInserted());
      assertEquals(1, sw.restore("big").size());
    }
  }
}
