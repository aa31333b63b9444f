package dev.stepwell;

import dev.stepwell.v1.Wait;
import io.grpc.Status;
import java.util.List;
import java.util.Map;

/**
 * ALREADY_EXISTS / WAIT_SETTLED: a Signal (or CancelWait) of a wait that another call settled
 * differently; nothing changed. {@link #getWait()} is the winner, read from the status details'
 * {@code stepwell.v1.WaitSettled}. The sidecar leaves a large payload out of the details; the
 * client then reads it with GetWait, so {@link #payloadOmitted()} is true only when that read
 * failed too.
 */
public class WaitSettledException extends WaitException {
  private final boolean payloadOmitted;

  public WaitSettledException(
      Status.Code code,
      String message,
      String reason,
      String field,
      Map<String, String> metadata,
      List<FieldViolation> violations,
      Throwable cause,
      Wait wait,
      boolean payloadOmitted) {
    super(code, message, reason, field, metadata, violations, cause, wait);
    this.payloadOmitted = payloadOmitted;
  }

  /** Whether {@link #getWait()} lacks the winner's payload. */
  public boolean payloadOmitted() {
    return payloadOmitted;
  }

  /** This failure with the winner read in full. */
  WaitSettledException withWait(Wait full) {
    return new WaitSettledException(
        code(), statusMessage(), reason(), field(), metadata(), violations(), getCause(), full,
        false);
  }
}
