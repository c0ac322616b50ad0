"""Action representations for Cosmos3 action post-training, in numpy (no scipy, no torch).

The conventions are cosmos-framework's (CF, `cosmos_framework/data/generator/action/utils/pose_utils.py`), so
that actions read here mean what CF-trained checkpoints and CF's eval servers expect:
- rot6d is the first two columns of R, column by column: `[R00, R10, R20, R01, R11, R21]` (CF's
  `convert_rotation(..., "rot6d")`: `matrices[:, :, :2].transpose(0, 2, 1).reshape(-1, 6)`).
- Euler angles are scipy's lowercase `"xyz"` (extrinsic x, then y, then z): R = Rz(c) @ Ry(b) @ Rx(a).
- A relative pose is `T_i^-1 @ T_{i+1}` (CF's `backward_framewise`), encoded as `[dpos 3, rot6d 6]`.

Two representations build on these (`ActionSpec.representation` in `cosmos_train.data.lerobot`):
- `ee_delta_rot6d` (DROID forward dynamics, CF `action_space="midtrain"`): from per-frame end-effector poses
  `[x, y, z, roll, pitch, yaw]`, T+1 poses give T deltas `[dpos, rot6d]`; each rotation is first
  right-multiplied by `DROID_TO_OPENCV` as CF's DROID dataset does (`droid_lerobot_dataset.py`).
- `axis_angle_to_rot6d` (LIBERO, CF `action_space="frame_wise_relative"`): each stored 7-D action
  `[dpos 3, axis-angle 3, gripper 1]` becomes 10-D `[dpos, rot6d, gripper]`; `rot6d_to_axis_angle_actions`
  turns a model's 10-D output back into the 7-D action the LIBERO simulator takes.
"""

from __future__ import annotations

import numpy as np

# CF's DROID Franka panda_link8 -> OpenCV camera convention: 90 degrees about the local z axis, applied as
# R @ DROID_TO_OPENCV to every absolute rotation before the deltas are taken (`_DROID_TO_OPENCV` in CF).
DROID_TO_OPENCV = np.array([[0.0, -1.0, 0.0], [1.0, 0.0, 0.0], [0.0, 0.0, 1.0]])

_SMALL = 1e-6  # below this angle (radians) the Taylor forms are exact to float64 precision


def _skew(v: np.ndarray) -> np.ndarray:
    """[..., 3] -> [..., 3, 3] with skew(v) @ w == cross(v, w)."""
    x, y, z = v[..., 0], v[..., 1], v[..., 2]
    zero = np.zeros_like(x)
    return np.stack(
        [np.stack([zero, -z, y], -1), np.stack([z, zero, -x], -1), np.stack([-y, x, zero], -1)], -2
    )


def axis_angle_to_matrix(rotvec: np.ndarray) -> np.ndarray:
    """Rodrigues' formula: [..., 3] axis * angle (radians) -> [..., 3, 3]."""
    v = np.asarray(rotvec, dtype=np.float64)
    theta = np.linalg.norm(v, axis=-1)[..., None, None]
    small = theta < _SMALL
    safe = np.where(small, 1.0, theta)
    # sin(t)/t and (1 - cos t)/t^2, with their Taylor limits near 0 so tiny rotations stay accurate
    a = np.where(small, 1.0 - theta**2 / 6.0, np.sin(safe) / safe)
    b = np.where(small, 0.5 - theta**2 / 24.0, (1.0 - np.cos(safe)) / safe**2)
    k = _skew(v)
    return np.eye(3) + a * k + b * (k @ k)


def matrix_to_axis_angle(matrix: np.ndarray) -> np.ndarray:
    """[..., 3, 3] -> [..., 3] axis * angle, angle in [0, pi]; goes through a unit quaternion, which stays
    accurate near 0 and pi where the trace formula does not."""
    m = np.asarray(matrix, dtype=np.float64)
    q = _matrix_to_quaternion(m)  # [..., 4] as (w, x, y, z), w >= 0
    w = np.clip(q[..., 0], -1.0, 1.0)
    xyz = q[..., 1:]
    s = np.linalg.norm(xyz, axis=-1)
    angle = 2.0 * np.arctan2(s, w)
    small = s < _SMALL
    scale = np.where(
        small, 2.0 / np.where(small, np.maximum(w, _SMALL), 1.0), angle / np.where(small, 1.0, s)
    )
    return xyz * scale[..., None]


def _matrix_to_quaternion(m: np.ndarray) -> np.ndarray:
    """Shepperd's method: take the largest of 4w^2, 4x^2, 4y^2, 4z^2 to divide by (never near 0)."""
    m00, m11, m22 = m[..., 0, 0], m[..., 1, 1], m[..., 2, 2]
    candidates = np.stack(
        [
            np.stack(
                [
                    1 + m00 + m11 + m22,
                    m[..., 2, 1] - m[..., 1, 2],
                    m[..., 0, 2] - m[..., 2, 0],
                    m[..., 1, 0] - m[..., 0, 1],
                ],
                -1,
            ),
            np.stack(
                [
                    m[..., 2, 1] - m[..., 1, 2],
                    1 + m00 - m11 - m22,
                    m[..., 0, 1] + m[..., 1, 0],
                    m[..., 0, 2] + m[..., 2, 0],
                ],
                -1,
            ),
            np.stack(
                [
                    m[..., 0, 2] - m[..., 2, 0],
                    m[..., 0, 1] + m[..., 1, 0],
                    1 - m00 + m11 - m22,
                    m[..., 1, 2] + m[..., 2, 1],
                ],
                -1,
            ),
            np.stack(
                [
                    m[..., 1, 0] - m[..., 0, 1],
                    m[..., 0, 2] + m[..., 2, 0],
                    m[..., 1, 2] + m[..., 2, 1],
                    1 - m00 - m11 + m22,
                ],
                -1,
            ),
        ],
        -2,
    )  # [..., 4 candidates, 4]; candidate i has 4 * q_i^2 at position i
    diag = np.stack([1 + m00 + m11 + m22, 1 + m00 - m11 - m22, 1 - m00 + m11 - m22, 1 - m00 - m11 + m22], -1)
    best = np.argmax(diag, axis=-1)
    q = np.take_along_axis(candidates, best[..., None, None], axis=-2)[..., 0, :]
    q = q / np.linalg.norm(q, axis=-1, keepdims=True)
    return np.where(q[..., :1] < 0, -q, q)


def euler_xyz_to_matrix(euler: np.ndarray) -> np.ndarray:
    """[..., 3] (roll, pitch, yaw) in radians, scipy's extrinsic `"xyz"` -> [..., 3, 3] = Rz @ Ry @ Rx."""
    e = np.asarray(euler, dtype=np.float64)
    ca, sa = np.cos(e[..., 0]), np.sin(e[..., 0])
    cb, sb = np.cos(e[..., 1]), np.sin(e[..., 1])
    cc, sc = np.cos(e[..., 2]), np.sin(e[..., 2])
    return np.stack(
        [
            np.stack([cb * cc, sa * sb * cc - ca * sc, ca * sb * cc + sa * sc], -1),
            np.stack([cb * sc, sa * sb * sc + ca * cc, ca * sb * sc - sa * cc], -1),
            np.stack([-sb, sa * cb, ca * cb], -1),
        ],
        -2,
    )


def matrix_to_rot6d(matrix: np.ndarray) -> np.ndarray:
    """[..., 3, 3] -> [..., 6]: column 0 then column 1 (CF's layout)."""
    m = np.asarray(matrix)
    return np.concatenate([m[..., :, 0], m[..., :, 1]], axis=-1)


def rot6d_to_matrix(rot6d: np.ndarray) -> np.ndarray:
    """[..., 6] -> [..., 3, 3]. Model outputs are not exactly orthonormal: like CF's decoder with
    `normalize_matrix=True`, the columns [a, b, a x b] are projected onto the nearest rotation (SVD)."""
    r = np.asarray(rot6d, dtype=np.float64)
    a, b = r[..., :3], r[..., 3:6]
    m = np.stack([a, b, np.cross(a, b)], axis=-1)
    u, _, vt = np.linalg.svd(m)
    fix = np.ones(m.shape[:-1])
    fix[..., -1] = np.sign(np.linalg.det(u @ vt))  # a reflection becomes the nearest proper rotation
    return (u * fix[..., None, :]) @ vt


def poses_to_matrices(poses: np.ndarray, to_opencv: bool = True) -> np.ndarray:
    """[N, 6] (x, y, z, roll, pitch, yaw) -> [N, 4, 4] homogeneous poses (CF's
    `build_abs_pose_from_components(..., "euler_xyz")`, then `R @ DROID_TO_OPENCV` when `to_opencv`)."""
    p = np.asarray(poses, dtype=np.float64)
    out = np.zeros((*p.shape[:-1], 4, 4))
    rotation = euler_xyz_to_matrix(p[..., 3:6])
    out[..., :3, :3] = rotation @ DROID_TO_OPENCV if to_opencv else rotation
    out[..., :3, 3] = p[..., :3]
    out[..., 3, 3] = 1.0
    return out


def ee_delta_rot6d(poses: np.ndarray, to_opencv: bool = True) -> np.ndarray:
    """[N, 6] per-frame poses -> [N-1, 9] `[dpos, rot6d]` of `T_i^-1 @ T_{i+1}`, float32.

    The inverse of a rigid transform is exact in closed form ([R^T, -R^T t]), so no matrix is inverted."""
    t = poses_to_matrices(poses, to_opencv)
    r, p = t[:-1, :3, :3], t[:-1, :3, 3]
    rt = np.swapaxes(r, -1, -2)
    d_rot = rt @ t[1:, :3, :3]
    d_pos = (rt @ (t[1:, :3, 3] - p)[..., None])[..., 0]
    return np.concatenate([d_pos, matrix_to_rot6d(d_rot)], axis=-1).astype(np.float32)


def axis_angle_to_rot6d_actions(actions: np.ndarray) -> np.ndarray:
    """[T, 7] `[dpos 3, axis-angle 3, gripper 1]` -> [T, 10] `[dpos, rot6d, gripper]`, float32."""
    a = np.asarray(actions, dtype=np.float64)
    if a.shape[-1] != 7:
        raise ValueError(f"axis_angle_to_rot6d needs 7-D actions, got {a.shape[-1]}-D")
    rot6d = matrix_to_rot6d(axis_angle_to_matrix(a[..., 3:6]))
    return np.concatenate([a[..., :3], rot6d, a[..., 6:7]], axis=-1).astype(np.float32)


def rot6d_to_axis_angle_actions(actions: np.ndarray) -> np.ndarray:
    """The inverse of `axis_angle_to_rot6d_actions`: [T, 10] -> [T, 7] (for a simulator that takes
    axis-angle), float32; the rot6d part need not be exactly orthonormal (see `rot6d_to_matrix`)."""
    a = np.asarray(actions, dtype=np.float64)
    if a.shape[-1] != 10:
        raise ValueError(f"rot6d actions must be 10-D, got {a.shape[-1]}-D")
    rotvec = matrix_to_axis_angle(rot6d_to_matrix(a[..., 3:9]))
    return np.concatenate([a[..., :3], rotvec, a[..., 9:10]], axis=-1).astype(np.float32)
