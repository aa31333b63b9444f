// ConnectionLostTest: calls whose connection to the sidecar is lost, through a DropProxy in front
// of the shared sidecar (plaintext, or TLS in the second pass of ./test).
package dev.stepwell;

import static org.junit.jupiter.api.Assertions.*;

import com.google.protobuf.Any;
import com.google.rpc.ErrorInfo;
import io.grpc.Context;
import io.grpc.Status;
import java.time.Duration;
import java.time.Instant;
import java.util.Base64;
import java.util.Map;
import java.util.UUID;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.extension.ExtendWith;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.EnumSource;
import org.junit.jupiter.params.provider.ValueSource;

/**
 * The client reports a lost connection as UNAVAILABLE and retries it, but keeps the caller's own
 * cancellation and the sidecar's own CANCELLED as they are.
 */
@ExtendWith(Sidecar.Extension.class)
class ConnectionLostTest {
  private static final RetryPolicy RETRY =
      new RetryPolicy(
          5, Duration.ofMillis(1), Duration.ofMillis(10), 2.0, 0.0, RetryPolicy.DEFAULT.retryable());

  private static String namespace(String prefix) {
    return prefix + "-" + UUID.randomUUID().toString().substring(0, 12);
  }

  private static Instant at(int second) {
    return Instant.ofEpochSecond(second);
  }

  /** How many checkpoints {@code turn} has, asked of the sidecar directly. */
  private static int stored(String ns, String turn) {
    try (StepwellClient direct = Sidecar.client()) {
      return direct.withNamespace(ns).restore(turn).size();
    }
  }

  /**
   * A call through the proxy, so that the next call uses an established connection. A client
   * without retries may first learn here that the proxy cut its last connection, so UNAVAILABLE is
   * asked again (bounded).
   */
  private static void warm(StepwellClient c) {
    for (int i = 0; i < 9; i++) {
      try {
        c.restore("warm");
        return;
      } catch (UnavailableException e) {
        // ask again
      }
    }
    c.restore("warm");
  }

  @ParameterizedTest
  @EnumSource(names = {"CUT_FIN", "CUT_RST", "RESET_STREAM"})
  void aCallWhoseConnectionIsLostIsUnavailableAndRetried(DropProxy.Mode mode) throws Exception {
    String ns = namespace("lost");
    try (DropProxy proxy = new DropProxy(Sidecar.target());
        StepwellClient root = Sidecar.clientVia(proxy.target())) {
      StepwellClient once = root.withNamespace(ns).withRetry(RetryPolicy.NONE);
      warm(once);
      proxy.arm(mode);
      UnavailableException e =
          assertThrows(
              UnavailableException.class,
              () -> once.checkpoint("once", "p", Map.of("n", 1), at(1), false));
      proxy.awaitApplied();
      assertEquals(Status.Code.UNAVAILABLE, e.code());
      assertEquals("", e.reason());
      assertEquals(0, stored(ns, "once"), "the lost call stored nothing");

      StepwellClient retrying = root.withNamespace(ns).withRetry(RETRY);
      warm(retrying);
      proxy.arm(mode);
      int before = proxy.requests.get();
      assertTrue(retrying.checkpoint("retried", "p", Map.of("n", 1), at(1), false).getInserted());
      assertEquals(2, proxy.requests.get() - before, "the lost attempt and its retry");
      assertEquals(1, stored(ns, "retried"));
    }
  }

  /**
   * A sidecar that goes away between calls: the next call, made at once on the connection the
   * client still holds, goes through on a new one or fails UNAVAILABLE, never with another code;
   * with retries it always goes through. Where the client learns of the loss is a race, so it is
   * run many times.
   */
  @ParameterizedTest
  @ValueSource(booleans = {false, true})
  void aSidecarGoneBetweenCallsIsUnavailableAndRetried(boolean reset) throws Exception {
    String ns = namespace("gone");
    try (DropProxy pOnce = new DropProxy(Sidecar.target());
        DropProxy pRetrying = new DropProxy(Sidecar.target());
        StepwellClient onceRoot = Sidecar.clientVia(pOnce.target());
        StepwellClient retryingRoot = Sidecar.clientVia(pRetrying.target())) {
      StepwellClient once = onceRoot.withNamespace(ns).withRetry(RetryPolicy.NONE);
      StepwellClient retrying = retryingRoot.withNamespace(ns).withRetry(RETRY);
      for (int i = 1; i <= 30; i++) {
        warm(once);
        pOnce.cutAll(reset);
        try {
          once.checkpoint("once", "p", Map.of("n", i), at(i), false);
        } catch (UnavailableException e) {
          // as it should be
        } catch (StepwellException e) {
          fail("round " + i + ": want success or UNAVAILABLE, got " + e, e);
        }
        warm(retrying);
        pRetrying.cutAll(reset);
        retrying.checkpoint("retried", "p", Map.of("n", i), at(i), false);
      }
    }
    assertEquals(30, stored(ns, "retried"));
  }

  @Test
  void theCallersCancellationStaysACancellation() throws Exception {
    try (DropProxy proxy = new DropProxy(Sidecar.target());
        StepwellClient root = Sidecar.clientVia(proxy.target())) {
      StepwellClient c = root.withNamespace(namespace("cancel")).withRetry(RETRY);
      warm(c);
      proxy.arm(DropProxy.Mode.HOLD);
      int before = proxy.requests.get();
      Context.CancellableContext call = Context.current().withCancellation();
      Thread canceller =
          new Thread(
              () -> {
                try {
                  proxy.awaitApplied();
                } catch (InterruptedException e) {
                  Thread.currentThread().interrupt();
                }
                call.cancel(null);
              });
      canceller.start();
      StepwellException e =
          assertThrows(
              StepwellException.class,
              () -> call.run(() -> c.checkpoint("t", "p", Map.of("n", 1), at(1), false)));
      canceller.join();
      assertEquals(Status.Code.CANCELLED, e.code(), e.toString());
      assertEquals(1, proxy.requests.get() - before, "not retried");
    }
  }

  /**
   * BODY_BROKEN_OFF (the request body broke off) is the sidecar's answer, not a lost connection: it
   * keeps its code and reason and is not retried.
   */
  @Test
  void aCancelledTheSidecarSentStaysCancelled() throws Exception {
    com.google.rpc.Status status =
        com.google.rpc.Status.newBuilder()
            .setCode(Status.Code.CANCELLED.value())
            .setMessage("the request body broke off")
            .addDetails(Any.pack(ErrorInfo.newBuilder().setReason("BODY_BROKEN_OFF").setDomain("stepwell.dev").build()))
            .build();
    try (DropProxy proxy = new DropProxy(Sidecar.target());
        StepwellClient root = Sidecar.clientVia(proxy.target())) {
      StepwellClient c = root.withNamespace(namespace("broken")).withRetry(RETRY);
      warm(c);
      proxy.armAnswer(
          DropProxy.trailersOnly(
              ":status", "200",
              "content-type", "application/grpc",
              "grpc-status", "1",
              "grpc-message", "the request body broke off",
              "grpc-status-details-bin", Base64.getEncoder().withoutPadding().encodeToString(status.toByteArray())));
      int before = proxy.requests.get();
      StepwellException e =
          assertThrows(StepwellException.class, () -> c.checkpoint("t", "p", Map.of("n", 1), at(1), false));
      assertEquals(Status.Code.CANCELLED, e.code());
      assertEquals("BODY_BROKEN_OFF", e.reason());
      assertEquals(1, proxy.requests.get() - before, "not retried");
    }
  }
}
