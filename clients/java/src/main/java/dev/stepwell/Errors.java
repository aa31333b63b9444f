package dev.stepwell;

import com.google.protobuf.Any;
import com.google.protobuf.InvalidProtocolBufferException;
import com.google.rpc.BadRequest;
import com.google.rpc.ErrorInfo;
import dev.stepwell.v1.WaitSettled;
import io.grpc.Context;
import io.grpc.Status;
import io.grpc.protobuf.StatusProto;
import java.io.IOException;
import java.nio.channels.ClosedChannelException;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;

/**
 * Decodes a failed RPC's gRPC status, with its {@code google.rpc} details (the sidecar's {@code
 * ErrorInfo}, a {@code BadRequest}, a {@code WaitSettled}), into the stepwell exception that
 * names it. Every call path goes through {@link #decode}; {@link StepwellException#from} is its
 * public face.
 */
final class Errors {
  private Errors() {}

  /**
   * Converts a gRPC failure into a StepwellException (or the subclass named by its reason): the
   * one place where a status, its ErrorInfo reason and its details become a stepwell exception.
   * A StepwellException is returned as it is.
   */
  static StepwellException decode(Throwable t) {
    if (t instanceof StepwellException se) return se;
    Status status = Status.fromThrowable(t);
    String reason = "";
    Map<String, String> metadata = Map.of();
    List<StepwellException.FieldViolation> violations = new ArrayList<>();
    WaitSettled settled = null;
    com.google.rpc.Status details = StatusProto.fromThrowable(t);
    if (details != null) {
      for (Any any : details.getDetailsList()) {
        try {
          if (any.is(ErrorInfo.class)) {
            ErrorInfo info = any.unpack(ErrorInfo.class);
            if (reason.isEmpty() || StepwellException.DOMAIN.equals(info.getDomain())) {
              reason = info.getReason();
              metadata = info.getMetadataMap();
            }
          } else if (any.is(WaitSettled.class)) {
            settled = any.unpack(WaitSettled.class);
          } else if (any.is(BadRequest.class)) {
            for (BadRequest.FieldViolation v : any.unpack(BadRequest.class).getFieldViolationsList()) {
              violations.add(new StepwellException.FieldViolation(v.getField(), v.getDescription()));
            }
          }
        } catch (InvalidProtocolBufferException ignored) {
          // a malformed detail: keep what could be decoded
        }
      }
    }
    String field = violations.isEmpty() ? "" : violations.get(0).field();
    if (reason.isEmpty() && connectionLost(status.getCode(), t)) {
      String message =
          "connection to the sidecar lost: " + status.getCode() + ": " + status.getDescription();
      return of(Status.Code.UNAVAILABLE, message, reason, field, metadata, violations, t);
    }
    if (reason.equals("WAIT_SETTLED")) {
      // The winner rides in the details; without them (a proxy dropped them) the wait is unknown.
      WaitSettled s = settled == null ? WaitSettled.getDefaultInstance() : settled;
      return new WaitSettledException(
          status.getCode(), status.getDescription(), reason, field, metadata, violations, t,
          s.getWait(), settled == null || s.getPayloadOmitted());
    }
    return of(status.getCode(), status.getDescription(), reason, field, metadata, violations, t);
  }

  /**
   * Whether a failure without the sidecar's ErrorInfo (every status of the sidecar's own carries
   * one, e.g. CANCELLED with BODY_BROKEN_OFF) is the transport's report of a connection to the
   * sidecar lost mid-call, which is then UNAVAILABLE (and retried) like a connection that cannot be
   * made. gRPC reports most lost connections as UNAVAILABLE itself ("Network closed for unknown
   * reason", "io exception"), but not all:
   *
   * <ul>
   *   <li>UNKNOWN, INTERNAL or CANCELLED caused by an {@link IOException} or a {@link
   *       ClosedChannelException}: a write that met a connection the peer had just closed, before
   *       the transport learnt of it ("UNKNOWN: channel closed");
   *   <li>CANCELLED that the caller did not ask for: the peer reset the call's stream
   *       (RST_STREAM with CANCEL), as a proxy in between does when it loses the sidecar.
   * </ul>
   *
   * The caller's own cancellation (a cancelled {@link Context}, an interrupted thread) stays
   * CANCELLED. {@code decode} runs on the thread that made the call, whose context that is.
   */
  static boolean connectionLost(Status.Code code, Throwable t) {
    boolean transportCode =
        code == Status.Code.UNKNOWN || code == Status.Code.INTERNAL || code == Status.Code.CANCELLED;
    if (!transportCode) return false;
    boolean callerCancelled =
        Context.current().isCancelled()
            || Thread.currentThread().isInterrupted()
            || causedBy(t, InterruptedException.class);
    if (callerCancelled) return false;
    if (causedBy(t, IOException.class) || causedBy(t, ClosedChannelException.class)) return true;
    return code == Status.Code.CANCELLED;
  }

  private static boolean causedBy(Throwable t, Class<? extends Throwable> type) {
    for (int depth = 0; t != null && depth < 16; t = t.getCause(), depth++) {
      if (type.isInstance(t)) return true;
    }
    return false;
  }

  /** The exception named by {@code reason}, or else by {@code code}. */
  static StepwellException of(
      Status.Code code,
      String message,
      String reason,
      String field,
      Map<String, String> metadata,
      List<StepwellException.FieldViolation> violations,
      Throwable cause) {
    switch (reason) {
      case "CHECKPOINT_CONFLICT":
        return new CheckpointConflictException(code, message, reason, field, metadata, violations, cause);
      case "WORKFLOW_VERSION_MISMATCH":
        return new WorkflowVersionMismatchException(code, message, reason, field, metadata, violations, cause);
      case "KEY_REUSED":
        return new KeyReusedException(code, message, reason, field, metadata, violations, cause);
      case "LEASE_LOST":
        return new LeaseLostException(code, message, reason, field, metadata, violations, cause);
      case "NOT_ACQUIRED":
        return new NotAcquiredException(code, message, reason, field, metadata, violations, cause);
      case "RESULT_MISMATCH":
        return new ResultMismatchException(code, message, reason, field, metadata, violations, cause);
      case "WAIT_NOT_FOUND":
        return new WaitNotFoundException(code, message, reason, field, metadata, violations, cause);
      case "WAITS_PER_TURN":
        return new WaitsPerTurnException(code, message, reason, field, metadata, violations, cause);
      case "KEY_NOT_FOUND":
        return new KeyNotFoundException(code, message, reason, field, metadata, violations, cause);
      case "OVERLOADED":
        return new OverloadedException(code, message, reason, field, metadata, violations, cause);
      case "MESSAGE_TOO_LARGE":
        return new MessageTooLargeException(code, message, reason, field, metadata, violations, cause);
      case "STORE_FULL":
        return new StoreFullException(code, message, reason, field, metadata, violations, cause);
      case "UNAUTHENTICATED":
        return new UnauthenticatedException(code, message, reason, field, metadata, violations, cause);
      case "PERMISSION_DENIED":
        return new PermissionDeniedException(code, message, reason, field, metadata, violations, cause);
      default:
        break;
    }
    if (code == Status.Code.INVALID_ARGUMENT) {
      return new InvalidArgumentException(code, message, reason, field, metadata, violations, cause);
    }
    if (code == Status.Code.UNAVAILABLE) {
      return new UnavailableException(code, message, reason, field, metadata, violations, cause);
    }
    // Without the sidecar's ErrorInfo (e.g. from a proxy in between) the code decides.
    if (code == Status.Code.UNAUTHENTICATED) {
      return new UnauthenticatedException(code, message, reason, field, metadata, violations, cause);
    }
    if (code == Status.Code.PERMISSION_DENIED) {
      return new PermissionDeniedException(code, message, reason, field, metadata, violations, cause);
    }
    if (code == Status.Code.RESOURCE_EXHAUSTED) {
      // An unknown reason, or none (e.g. from a proxy).
      return new OverloadedException(code, message, reason, field, metadata, violations, cause);
    }
    return new StepwellException(code, message, reason, field, metadata, violations, cause);
  }
}
