package dev.stepwell;

import io.grpc.Status;
import java.time.Duration;
import java.util.Set;
import java.util.concurrent.ThreadLocalRandom;

/**
 * Retries of an RPC that failed with a retryable status. The very same request message is resent
 * on every attempt (same dedup tuple, key, token and result), so a retry can be answered as a
 * duplicate but never stores anything twice. UNAVAILABLE is retried, and so is RESOURCE_EXHAUSTED
 * when its reason is OVERLOADED (nothing was stored) or when it carries no ErrorInfo at all (e.g.
 * from a proxy). RESOURCE_EXHAUSTED with MESSAGE_TOO_LARGE (the same request can never fit) or
 * STORE_FULL (only an operator freeing space helps) is thrown at once, as is everything else.
 * UNAUTHENTICATED and PERMISSION_DENIED are never retried, even when listed in {@code retryable}:
 * the same credentials fail again.
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

  /** Codes a retry cannot change: the credentials are the same on every attempt. */
  static final Set<Status.Code> NEVER_RETRIED =
      Set.of(Status.Code.UNAUTHENTICATED, Status.Code.PERMISSION_DENIED);

  /** The RESOURCE_EXHAUSTED reasons worth a retry: OVERLOADED, and none at all. */
  static final Set<String> RETRYABLE_EXHAUSTED_REASONS = Set.of("OVERLOADED", "");

  /** Whether a failure of attempt {@code attempt} is tried again. */
  public boolean shouldRetry(StepwellException e, int attempt) {
    if (attempt >= maxAttempts || !retryable.contains(e.code())) return false;
    if (NEVER_RETRIED.contains(e.code())) return false;
    if (e.code() == Status.Code.RESOURCE_EXHAUSTED) {
      return RETRYABLE_EXHAUSTED_REASONS.contains(e.reason());
    }
    return true;
  }
}
