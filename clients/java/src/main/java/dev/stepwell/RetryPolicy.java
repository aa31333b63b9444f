package dev.stepwell;

import io.grpc.Status;
import java.time.Duration;
import java.util.Set;
import java.util.concurrent.ThreadLocalRandom;

/**
 * Retries of an RPC that failed with a retryable status. The very same request message is resent
 * on every attempt (same dedup tuple, key, token and result), so a retry can be answered as a
 * duplicate but never stores anything twice. UNAVAILABLE and RESOURCE_EXHAUSTED (OVERLOADED:
 * nothing was stored) are retried; everything else is thrown at once.
 */
public record RetryPolicy(
    int maxAttempts,
    Duration initialBackoff,
    Duration maxBackoff,
    double multiplier,
    double jitter,
    Set<Status.Code> retryable) {

  /** 5 attempts, 50 ms doubling up to 2 s, 20 % jitter, on UNAVAILABLE and RESOURCE_EXHAUSTED. */
  public static final RetryPolicy DEFAULT =
      new RetryPolicy(
          5,
          Duration.ofMillis(50),
          Duration.ofSeconds(2),
          2.0,
          0.2,
          Set.of(Status.Code.UNAVAILABLE, Status.Code.RESOURCE_EXHAUSTED));

  /** One attempt: every error reaches the caller. */
  public static final RetryPolicy NONE =
      new RetryPolicy(1, Duration.ZERO, Duration.ZERO, 1.0, 0.0, Set.of());

  public RetryPolicy {
    if (maxAttempts < 1) throw new IllegalArgumentException("maxAttempts must be >= 1");
    retryable = Set.copyOf(retryable);
  }

  /** The sleep before attempt {@code attempt + 1} (attempt counts from 1). */
  public Duration backoff(int attempt) {
    double base =
        Math.min(
            maxBackoff.toNanos(), initialBackoff.toNanos() * Math.pow(multiplier, attempt - 1));
    double j = jitter == 0 ? 0 : ThreadLocalRandom.current().nextDouble(-jitter, jitter);
    return Duration.ofNanos((long) (base * (1 + j)));
  }

  /** Whether a failure of attempt {@code attempt} is tried again. */
  public boolean shouldRetry(StepwellException e, int attempt) {
    return attempt < maxAttempts && retryable.contains(e.code());
  }
}
